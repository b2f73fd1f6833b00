//! The process's uid, gid and additional groups, resolved against the image's `/etc/passwd`
//! and `/etc/group` the way containerd does (`WithUser`, `WithAdditionalGIDs`,
//! `WithSupplementalGroups`).

use std::collections::BTreeSet;

use super::OciError;
use crate::mount::EtcFiles;

/// One `/etc/passwd` line.
#[derive(Debug, PartialEq)]
struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
}

/// One `/etc/group` line.
#[derive(Debug, PartialEq)]
struct GroupEntry<'a> {
    name: &'a str,
    gid: u32,
    members: Vec<&'a str>,
}

/// Meaningful lines of a colon-separated database, split into fields.
fn records(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(':').collect())
}

fn passwd(text: &str) -> impl Iterator<Item = PasswdEntry<'_>> {
    records(text).filter_map(|f| {
        Some(PasswdEntry {
            name: f.first()?,
            uid: f.get(2)?.trim().parse().ok()?,
            gid: f.get(3)?.trim().parse().ok()?,
        })
    })
}

fn groups(text: &str) -> impl Iterator<Item = GroupEntry<'_>> {
    records(text).filter_map(|f| {
        Some(GroupEntry {
            name: f.first()?,
            gid: f.get(2)?.trim().parse().ok()?,
            members: f
                .get(3)
                .map(|m| {
                    m.split(',')
                        .map(str::trim)
                        .filter(|m| !m.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        })
    })
}

/// The uid/gid a process runs as, plus its additional groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvedUser {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
}

/// What CRI asked for, and where the image's default comes in.
pub(crate) struct UserRequest<'a> {
    /// `run_as_username` (containers only; empty for sandboxes).
    pub username: &'a str,
    pub uid: Option<i64>,
    pub gid: Option<i64>,
    pub supplemental_groups: &'a [i64],
    /// Whether the image's group memberships are added (SupplementalGroupsPolicy Merge).
    pub merge_image_groups: bool,
    /// The image config's `User` (`user`, `uid`, `user:group`, `uid:gid`).
    pub image_user: &'a str,
    /// Request field prefix for error messages (`linux.security_context`).
    pub field: &'a str,
}

/// The ids kubelet's security context and the image's USER give, as containerd resolves them.
pub(crate) fn resolve(req: &UserRequest<'_>, etc: &EtcFiles) -> Result<ResolvedUser, OciError> {
    let requested = requested_user(req)?;
    let (userstr, field) = if requested.is_empty() {
        (req.image_user.to_string(), "image.config.User".to_string())
    } else {
        let which = if req.username.is_empty() {
            "run_as_user"
        } else {
            "run_as_username"
        };
        (requested, format!("{}.{which}", req.field))
    };
    let (uid, gid) = if userstr.is_empty() {
        (0, 0)
    } else {
        ids_for(&userstr, etc, &field)?
    };

    let mut gids = BTreeSet::from([gid]);
    if req.merge_image_groups {
        // Memberships are looked up for the user alone, never for a `:group` suffix.
        let member = if !req.username.is_empty() {
            req.username.to_string()
        } else if let Some(uid) = req.uid {
            uid.to_string()
        } else if !req.image_user.is_empty() {
            req.image_user.split(':').next().unwrap_or("").to_string()
        } else {
            "0".to_string()
        };
        gids.extend(image_groups(&member, etc));
    }
    for (i, &g) in req.supplemental_groups.iter().enumerate() {
        let g = u32::try_from(g).map_err(|_| {
            OciError::invalid(
                format!("{}.supplemental_groups[{i}]", req.field),
                g.to_string(),
                "gid out of range",
            )
        })?;
        gids.insert(g);
    }
    Ok(ResolvedUser {
        uid,
        gid,
        additional_gids: gids.into_iter().collect(),
    })
}

/// CRI's user string: `username`, `uid`, `username:gid` or `uid:gid`; a gid without a user is
/// an error.
fn requested_user(req: &UserRequest<'_>) -> Result<String, OciError> {
    let user = if !req.username.is_empty() {
        req.username.to_string()
    } else if let Some(uid) = req.uid {
        uid.to_string()
    } else {
        String::new()
    };
    match (user.is_empty(), req.gid) {
        (true, Some(gid)) => Err(OciError::invalid(
            format!("{}.run_as_group", req.field),
            gid.to_string(),
            "a group is specified without a user",
        )),
        (false, Some(gid)) => Ok(format!("{user}:{gid}")),
        (_, None) => Ok(user),
    }
}

/// uid and gid for a USER string; numeric ids need no passwd entry (gid then defaults to the
/// entry's, or 0), names must resolve.
fn ids_for(userstr: &str, etc: &EtcFiles, field: &str) -> Result<(u32, u32), OciError> {
    let bad = |reason: &str| OciError::invalid(field, userstr, reason);
    let parts: Vec<&str> = userstr.split(':').collect();
    match parts.as_slice() {
        [user] => match parse_id(user) {
            Some(Ok(uid)) => {
                let gid = passwd(&etc.passwd)
                    .find(|e| e.uid == uid)
                    .map_or(0, |e| e.gid);
                Ok((uid, gid))
            }
            Some(Err(())) => Err(bad("uid out of range")),
            None => passwd(&etc.passwd)
                .find(|e| e.name == *user)
                .map(|e| (e.uid, e.gid))
                .ok_or_else(|| bad("no such user in the image's /etc/passwd")),
        },
        [user, group] => {
            let uid = match parse_id(user) {
                Some(Ok(uid)) => uid,
                Some(Err(())) => return Err(bad("uid out of range")),
                None => passwd(&etc.passwd)
                    .find(|e| e.name == *user)
                    .map(|e| e.uid)
                    .ok_or_else(|| bad("no such user in the image's /etc/passwd"))?,
            };
            let gid = match parse_id(group) {
                Some(Ok(gid)) => gid,
                Some(Err(())) => return Err(bad("gid out of range")),
                None => groups(&etc.group)
                    .find(|g| g.name == *group)
                    .map(|g| g.gid)
                    .ok_or_else(|| bad("no such group in the image's /etc/group"))?,
            };
            Ok((uid, gid))
        }
        _ => Err(bad("expected user, uid, user:group or uid:gid")),
    }
}

/// All digits, optionally signed: a number even when it overflows.
fn is_number(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// `None` for a name, `Some(Err)` for a number runc cannot use (it caps ids at i32::MAX).
fn parse_id(s: &str) -> Option<Result<u32, ()>> {
    let n: i64 = match s.parse() {
        Ok(n) => n,
        // All digits but too long for an i64: a number, and out of range.
        Err(_) if is_number(s) => return Some(Err(())),
        Err(_) => return None,
    };
    Some(
        u32::try_from(n)
            .ok()
            .filter(|&n| i32::try_from(n).is_ok())
            .ok_or(()),
    )
}

/// The groups `/etc/group` lists `user` (a name, or a uid resolved through passwd) as a member of,
/// except its own same-named group.
fn image_groups(user: &str, etc: &EtcFiles) -> Vec<u32> {
    let name = match user.parse::<u32>() {
        Ok(uid) => match passwd(&etc.passwd).find(|e| e.uid == uid) {
            Some(e) => e.name,
            None => return Vec::new(),
        },
        Err(_) => user,
    };
    groups(&etc.group)
        .filter(|g| g.name != name && g.members.contains(&name))
        .map(|g| g.gid)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn etc() -> EtcFiles {
        EtcFiles {
            passwd: "root:x:0:0:root:/root:/bin/sh\n\
                     # comment\n\
                     daemon:x:1:1::/:/bin/false\n\
                     app:x:1000:1000::/home/app:/bin/sh\n\
                     broken:x:notanumber:1::/:/bin/sh\n"
                .into(),
            group: "root:x:0:\n\
                    bin:x:1:root,daemon\n\
                    wheel:x:10:root,app\n\
                    app:x:1000:app\n\
                    staff:x:50:app\n"
                .into(),
        }
    }

    fn req<'a>() -> UserRequest<'a> {
        UserRequest {
            username: "",
            uid: None,
            gid: None,
            supplemental_groups: &[],
            merge_image_groups: true,
            image_user: "",
            field: "linux.security_context",
        }
    }

    #[test]
    fn no_user_anywhere_is_root_with_roots_groups() {
        let u = resolve(&req(), &etc()).unwrap();
        assert_eq!((u.uid, u.gid), (0, 0));
        assert_eq!(u.additional_gids, [0, 1, 10]);
    }

    #[test]
    fn numeric_uid_takes_gid_from_passwd() {
        let r = UserRequest {
            uid: Some(1000),
            ..req()
        };
        let u = resolve(&r, &etc()).unwrap();
        assert_eq!((u.uid, u.gid), (1000, 1000));
        // app's own group is not "additional"; its primary gid is always listed.
        assert_eq!(u.additional_gids, [10, 50, 1000]);
    }

    #[test]
    fn uid_without_passwd_entry_gets_gid_0() {
        let r = UserRequest {
            uid: Some(4242),
            ..req()
        };
        let u = resolve(&r, &etc()).unwrap();
        assert_eq!((u.uid, u.gid, u.additional_gids), (4242, 0, vec![0]));
        let u = resolve(&r, &EtcFiles::default()).unwrap();
        assert_eq!((u.uid, u.gid), (4242, 0));
    }

    #[test]
    fn username_resolves_through_passwd() {
        let r = UserRequest {
            username: "app",
            uid: Some(5),
            ..req()
        };
        let u = resolve(&r, &etc()).unwrap();
        assert_eq!((u.uid, u.gid), (1000, 1000));
    }

    #[test]
    fn unknown_username_is_invalid() {
        let r = UserRequest {
            username: "nobody",
            ..req()
        };
        let err = resolve(&r, &etc()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "linux.security_context.run_as_username \"nobody\": no such user in the image's /etc/passwd"
        );
    }

    #[test]
    fn run_as_group_overrides_and_needs_a_user() {
        let r = UserRequest {
            uid: Some(1000),
            gid: Some(3000),
            ..req()
        };
        let u = resolve(&r, &etc()).unwrap();
        assert_eq!((u.uid, u.gid), (1000, 3000));
        assert!(u.additional_gids.contains(&3000));
        let r = UserRequest {
            gid: Some(3000),
            ..req()
        };
        let err = resolve(&r, &etc()).unwrap_err();
        assert!(err.to_string().contains("run_as_group \"3000\""), "{err}");
    }

    #[test]
    fn image_user_forms() {
        let with = |u: &'static str| UserRequest {
            image_user: u,
            ..req()
        };
        let ids = |u| {
            let r = resolve(&with(u), &etc()).unwrap();
            (r.uid, r.gid)
        };
        assert_eq!(ids("app"), (1000, 1000));
        assert_eq!(ids("1000"), (1000, 1000));
        assert_eq!(ids("app:staff"), (1000, 50));
        assert_eq!(ids("app:7"), (1000, 7));
        assert_eq!(ids("1:staff"), (1, 50));
        assert_eq!(ids("33:44"), (33, 44));
        let err = resolve(&with("app:nogroup"), &etc()).unwrap_err();
        assert!(err.to_string().contains("no such group"), "{err}");
        let err = resolve(&with("a:b:c"), &etc()).unwrap_err();
        assert!(err.to_string().starts_with("image.config.User"), "{err}");
        // Groups come from the user part only; the primary group is the named one.
        let r = resolve(&with("app:staff"), &etc()).unwrap();
        assert_eq!(r.additional_gids, [10, 50]);
    }

    #[test]
    fn ids_out_of_range_are_refused() {
        for uid in [-1, i64::from(i32::MAX) + 1] {
            let r = UserRequest {
                uid: Some(uid),
                ..req()
            };
            let err = resolve(&r, &etc()).unwrap_err();
            assert!(err.to_string().contains("uid out of range"), "{err}");
        }
        let r = UserRequest {
            image_user: "99999999999999999999999",
            ..req()
        };
        assert!(resolve(&r, &etc()).is_err());
    }

    #[test]
    fn supplemental_groups_merge_or_stand_alone() {
        let r = UserRequest {
            uid: Some(1000),
            supplemental_groups: &[1234, 5678, 10],
            ..req()
        };
        let u = resolve(&r, &etc()).unwrap();
        assert_eq!(u.additional_gids, [10, 50, 1000, 1234, 5678]);
        let strict = UserRequest {
            merge_image_groups: false,
            ..r
        };
        let u = resolve(&strict, &etc()).unwrap();
        assert_eq!(u.additional_gids, [10, 1000, 1234, 5678]);
        let bad = UserRequest {
            supplemental_groups: &[-3],
            ..req()
        };
        let err = resolve(&bad, &etc()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "linux.security_context.supplemental_groups[0] \"-3\": gid out of range"
        );
    }

    #[test]
    fn parsers_skip_garbage() {
        let e = etc();
        assert_eq!(passwd(&e.passwd).count(), 3);
        let g: Vec<_> = groups(&e.group).collect();
        assert_eq!(g[1].members, ["root", "daemon"]);
        assert!(g[0].members.is_empty());
    }
}
