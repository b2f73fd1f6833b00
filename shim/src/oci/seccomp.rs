//! Seccomp: choosing a profile from the CRI security context (RuntimeDefault, Unconfined,
//! Localhost), the RuntimeDefault profile itself (Docker's default allow-list, widened per
//! capability as containerd does), and loading Localhost profiles from disk.

use std::path::PathBuf;
use std::sync::OnceLock;

use ferrolet_proto::cri;
use oci_spec::runtime::{
    Arch, Capabilities, Capability, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg,
    LinuxSeccompArgBuilder, LinuxSeccompOperator, LinuxSyscall, Spec,
};

use super::OciError;

/// Syscalls every container may make (whitespace-separated to keep the table readable).
const ALLOWED: &str = "
    _llseek _newselect accept accept4 access adjtimex alarm bind brk cachestat capget capset
    chdir chmod chown chown32 clock_adjtime clock_adjtime64 clock_getres clock_getres_time64
    clock_gettime clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range
    connect copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl
    epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2
    execve execveat exit exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate
    fanotify_mark fchdir fchmod fchmodat fchmodat2 fchown fchown32 fchownat fcntl fcntl64
    fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstat64 fstatat64
    fstatfs fstatfs64 fsync ftruncate ftruncate64 futex futex_requeue futex_time64
    futex_wait futex_waitv futex_wake futimesat get_robust_list get_thread_area getcpu
    getcwd getdents getdents64 getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups
    getgroups32 getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom
    getresgid getresgid32 getresuid getresuid32 getrlimit getrusage getsid getsockname
    getsockopt gettid gettimeofday getuid getuid32 getxattr getxattrat inotify_add_watch
    inotify_init inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents
    io_pgetevents io_pgetevents_time64 io_setup io_submit ioctl ioprio_get ioprio_set ipc
    kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lchown32
    lgetxattr link linkat listen listmount listxattr listxattrat llistxattr lremovexattr
    lseek lsetxattr lsm_get_self_attr lsm_list_modules lsm_set_self_attr lstat lstat64
    madvise map_shadow_stack membarrier memfd_create memfd_secret mincore mkdir mkdirat
    mknod mknodat mlock mlock2 mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open
    mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap
    mseal msgctl msgget msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at
    nanosleep newfstatat open openat openat2 pause pidfd_open pidfd_send_signal pipe
    pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll ppoll_time64 prctl pread64 preadv
    preadv2 prlimit64 process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2
    read readahead readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64
    recvmsg remap_file_pages removexattr removexattrat rename renameat renameat2
    restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo
    rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo
    sched_get_priority_max sched_get_priority_min sched_getaffinity sched_getattr
    sched_getparam sched_getscheduler sched_rr_get_interval sched_rr_get_interval_time64
    sched_setaffinity sched_setattr sched_setparam sched_setscheduler sched_yield seccomp
    select semctl semget semop semtimedop semtimedop_time64 send sendfile sendfile64 sendmmsg
    sendmsg sendto set_robust_list set_thread_area set_tid_address setfsgid setfsgid32
    setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid setpriority
    setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32
    setrlimit setsid setsockopt setuid setuid32 setxattr setxattrat shmat shmctl shmdt
    shmget shutdown sigaltstack signalfd signalfd4 sigprocmask sigreturn socket socketcall
    socketpair splice stat stat64 statfs statfs64 statmount statx symlink symlinkat sync
    sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete timer_getoverrun
    timer_gettime timer_gettime64 timer_settime timer_settime64 timerfd_create timerfd_gettime
    timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill truncate truncate64
    ugetrlimit umask uname unlink unlinkat uretprobe utime utimensat utimensat_time64 utimes
    vfork vmsplice wait4 waitid waitpid write writev
";

/// Allowed on every architecture only when the kernel is new enough (4.8) to make them safe.
const ALLOWED_SINCE_4_8: &[&str] = &["process_vm_readv", "process_vm_writev", "ptrace"];

/// Architecture-specific syscalls Docker allows.
#[cfg(target_arch = "x86_64")]
const ARCH_ALLOWED: &[&str] = &["arch_prctl", "modify_ldt"];
#[cfg(target_arch = "x86")]
const ARCH_ALLOWED: &[&str] = &["modify_ldt"];
#[cfg(target_arch = "aarch64")]
const ARCH_ALLOWED: &[&str] = &[
    "arm_fadvise64_64",
    "arm_sync_file_range",
    "sync_file_range2",
    "breakpoint",
    "cacheflush",
    "set_tls",
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64")))]
const ARCH_ALLOWED: &[&str] = &[];

/// The ABIs a process on this machine can call the kernel with.
fn architectures() -> Vec<Arch> {
    if cfg!(target_arch = "x86_64") {
        vec![Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    } else if cfg!(target_arch = "aarch64") {
        vec![Arch::ScmpArchArm, Arch::ScmpArchAarch64]
    } else if cfg!(target_arch = "x86") {
        vec![Arch::ScmpArchX86]
    } else {
        Vec::new()
    }
}

/// Syscalls a capability makes meaningful, so holding it also lifts the filter.
fn capability_syscalls(cap: Capability) -> &'static [&'static str] {
    match cap {
        Capability::DacReadSearch => &["open_by_handle_at"],
        Capability::SysAdmin => &[
            "bpf",
            "clone",
            "clone3",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
        Capability::SysBoot => &["reboot"],
        Capability::SysChroot => &["chroot"],
        Capability::SysModule => &["delete_module", "init_module", "finit_module"],
        Capability::SysPacct => &["acct"],
        Capability::SysPtrace => &[
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "process_vm_readv",
            "process_vm_writev",
            "ptrace",
        ],
        Capability::SysRawio => &["iopl", "ioperm"],
        Capability::SysTime => &["settimeofday", "stime", "clock_settime", "clock_settime64"],
        Capability::SysTtyConfig => &["vhangup"],
        Capability::SysNice => &[
            "get_mempolicy",
            "mbind",
            "set_mempolicy",
            "set_mempolicy_home_node",
        ],
        Capability::Syslog => &["syslog"],
        Capability::Bpf => &["bpf"],
        Capability::Perfmon => &["perf_event_open"],
        _ => &[],
    }
}

/// `personality(2)` domains Docker allows (Linux, Linux32, with UNAME26, and the query).
const PERSONALITIES: &[u64] = &[0x0, 0x0008, 0x20000, 0x20008, 0xffff_ffff];

/// Namespace flags `clone(2)` may not carry without CAP_SYS_ADMIN.
const CLONE_NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64;

fn rule(names: &[&str], action: LinuxSeccompAction) -> LinuxSyscall {
    let mut r = LinuxSyscall::default();
    r.set_names(names.iter().map(|s| s.to_string()).collect())
        .set_action(action);
    r
}

fn arg(
    index: usize,
    value: u64,
    value_two: Option<u64>,
    op: LinuxSeccompOperator,
) -> LinuxSeccompArg {
    let mut b = LinuxSeccompArgBuilder::default()
        .index(index)
        .value(value)
        .op(op);
    if let Some(v) = value_two {
        b = b.value_two(v);
    }
    // The builder cannot fail: every field has a default and none is validated.
    b.build().unwrap_or_default()
}

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    static RELEASE: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    let release = RELEASE.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        let mut parts = text.trim().split(['.', '-']);
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    });
    // An unreadable release is assumed modern: every kernel containerd 1.6 supports is.
    release.is_none_or(|r| r >= (major, minor))
}

/// The RuntimeDefault profile for a process with bounding set `caps`: deny (EPERM) by default,
/// allow the common syscalls, and the ones each held capability makes meaningful.
pub(crate) fn default_profile(caps: &Capabilities) -> LinuxSeccomp {
    let allowed: Vec<&str> = ALLOWED.split_whitespace().collect();
    let mut rules = vec![rule(&allowed, LinuxSeccompAction::ScmpActAllow)];
    for &p in PERSONALITIES {
        let mut r = rule(&["personality"], LinuxSeccompAction::ScmpActAllow);
        r.set_args(Some(vec![arg(0, p, None, LinuxSeccompOperator::ScmpCmpEq)]));
        rules.push(r);
    }
    if kernel_at_least(4, 8) {
        rules.push(rule(ALLOWED_SINCE_4_8, LinuxSeccompAction::ScmpActAllow));
    }
    if !ARCH_ALLOWED.is_empty() {
        rules.push(rule(ARCH_ALLOWED, LinuxSeccompAction::ScmpActAllow));
    }
    // A stable order keeps specs reproducible (the capability set is a hash set).
    let mut held: Vec<Capability> = caps.iter().copied().collect();
    held.sort_by_key(|c| format!("{c:?}"));
    for cap in held {
        let names = capability_syscalls(cap);
        if !names.is_empty() {
            rules.push(rule(names, LinuxSeccompAction::ScmpActAllow));
        }
    }
    if !caps.contains(&Capability::SysAdmin) {
        // Plain fork-style clone is fine; creating namespaces needs CAP_SYS_ADMIN. s390 passes
        // the flags in the second argument.
        let index = if cfg!(target_arch = "s390x") { 1 } else { 0 };
        let mut r = rule(&["clone"], LinuxSeccompAction::ScmpActAllow);
        r.set_args(Some(vec![arg(
            index,
            CLONE_NAMESPACE_FLAGS,
            Some(0),
            LinuxSeccompOperator::ScmpCmpMaskedEq,
        )]));
        rules.push(r);
        // clone3 cannot be argument-filtered; ENOSYS makes libcs fall back to clone (moby#42681).
        let mut r = rule(&["clone3"], LinuxSeccompAction::ScmpActErrno);
        r.set_errno_ret(Some(libc::ENOSYS as u32));
        rules.push(r);
    }
    let mut profile = LinuxSeccomp::default();
    profile
        .set_default_action(LinuxSeccompAction::ScmpActErrno)
        .set_architectures(Some(architectures()))
        .set_syscalls(Some(rules));
    profile
}

/// What the security context asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    /// No filter.
    Unconfined,
    /// [`default_profile`].
    RuntimeDefault,
    /// A JSON profile file on the node.
    Localhost(PathBuf),
}

const LOCALHOST_PREFIX: &str = "localhost/";

/// The profile a security context selects: `seccomp` when set, else the deprecated
/// `seccomp_profile_path` (`runtime/default`, `docker/default`, `unconfined`,
/// `localhost/<path>`); neither means unconfined, as with containerd's default config.
pub(crate) fn choose(
    profile: Option<&cri::SecurityProfile>,
    deprecated_path: &str,
    field: &str,
) -> Result<Choice, OciError> {
    use cri::security_profile::ProfileType;
    if let Some(p) = profile {
        let kind = ProfileType::try_from(p.profile_type).map_err(|_| {
            OciError::invalid(
                format!("{field}.seccomp.profile_type"),
                p.profile_type.to_string(),
                "unknown profile type",
            )
        })?;
        if kind != ProfileType::Localhost && !p.localhost_ref.is_empty() {
            return Err(OciError::invalid(
                format!("{field}.seccomp.localhost_ref"),
                &p.localhost_ref,
                "only allowed with profile type Localhost",
            ));
        }
        return match kind {
            ProfileType::Unconfined => Ok(Choice::Unconfined),
            ProfileType::RuntimeDefault => Ok(Choice::RuntimeDefault),
            ProfileType::Localhost => {
                let path = p.localhost_ref.trim_start_matches(LOCALHOST_PREFIX);
                if path.is_empty() {
                    return Err(OciError::invalid(
                        format!("{field}.seccomp.localhost_ref"),
                        &p.localhost_ref,
                        "a Localhost profile needs a file path",
                    ));
                }
                Ok(Choice::Localhost(PathBuf::from(path)))
            }
        };
    }
    match deprecated_path {
        "" | "unconfined" => Ok(Choice::Unconfined),
        "runtime/default" | "docker/default" => Ok(Choice::RuntimeDefault),
        other => match other.strip_prefix(LOCALHOST_PREFIX) {
            Some(path) if !path.is_empty() => Ok(Choice::Localhost(PathBuf::from(path))),
            _ => Err(OciError::invalid(
                format!("{field}.seccomp_profile_path"),
                other,
                "expected runtime/default, docker/default, unconfined or localhost/<path>",
            )),
        },
    }
}

/// Reads a Localhost profile (an OCI `linux.seccomp` object in JSON).
fn load(path: &std::path::Path, field: &str) -> Result<LinuxSeccomp, OciError> {
    let text = std::fs::read(path).map_err(|e| {
        OciError::invalid(
            format!("{field}.seccomp.localhost_ref"),
            path.to_string_lossy(),
            format!("cannot read the seccomp profile: {e}"),
        )
    })?;
    serde_json::from_slice(&text).map_err(|e| {
        OciError::invalid(
            format!("{field}.seccomp.localhost_ref"),
            path.to_string_lossy(),
            format!("not a seccomp profile: {e}"),
        )
    })
}

/// Sets the spec's filter; privileged processes run unfiltered whatever was asked. Must run
/// after the capabilities are final, since RuntimeDefault depends on them.
pub(crate) fn apply(
    spec: &mut Spec,
    choice: &Choice,
    privileged: bool,
    field: &str,
) -> Result<(), OciError> {
    let profile = match (privileged, choice) {
        (true, _) | (false, Choice::Unconfined) => None,
        (false, Choice::RuntimeDefault) => Some(default_profile(&super::security::bounding(spec))),
        (false, Choice::Localhost(path)) => Some(load(path, field)?),
    };
    if let Some(l) = spec.linux_mut() {
        l.set_seccomp(profile);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::defaults::default_capabilities;
    use super::*;
    use cri::security_profile::ProfileType;

    fn names(p: &LinuxSeccomp, action: LinuxSeccompAction) -> Vec<String> {
        p.syscalls()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|r| r.action() == action && r.args().is_none())
            .flat_map(|r| r.names().clone())
            .collect()
    }

    #[test]
    fn default_profile_denies_by_default_and_allows_the_common_set() {
        let p = default_profile(&default_capabilities());
        assert_eq!(p.default_action(), LinuxSeccompAction::ScmpActErrno);
        let allowed = names(&p, LinuxSeccompAction::ScmpActAllow);
        for s in ["read", "write", "execve", "socket", "chroot", "ptrace"] {
            assert!(allowed.iter().any(|a| a == s), "{s}");
        }
        for s in [
            "mount",
            "unshare",
            "sethostname",
            "reboot",
            "kexec_load",
            "clone",
        ] {
            assert!(!allowed.iter().any(|a| a == s), "{s}");
        }
        // clone only without namespace flags, clone3 answers ENOSYS.
        let rules = p.syscalls().as_ref().unwrap();
        let clone = rules.iter().find(|r| r.names() == &["clone"]).unwrap();
        let a = clone.args().as_ref().unwrap()[0];
        assert_eq!(a.op(), LinuxSeccompOperator::ScmpCmpMaskedEq);
        assert_eq!(
            a.value() & libc::CLONE_NEWUSER as u64,
            libc::CLONE_NEWUSER as u64
        );
        assert_eq!(a.value_two(), Some(0));
        let clone3 = rules.iter().find(|r| r.names() == &["clone3"]).unwrap();
        assert_eq!(clone3.errno_ret(), Some(libc::ENOSYS as u32));
        assert_eq!(
            rules
                .iter()
                .filter(|r| r.names() == &["personality"])
                .count(),
            PERSONALITIES.len()
        );
        if cfg!(target_arch = "x86_64") {
            assert_eq!(p.architectures().as_ref().unwrap()[0], Arch::ScmpArchX86_64);
        }
    }

    #[test]
    fn capabilities_widen_the_default_profile() {
        let mut caps = default_capabilities();
        caps.insert(Capability::SysAdmin);
        caps.insert(Capability::SysTime);
        let p = default_profile(&caps);
        let allowed = names(&p, LinuxSeccompAction::ScmpActAllow);
        for s in [
            "mount",
            "unshare",
            "clone",
            "clone3",
            "sethostname",
            "settimeofday",
        ] {
            assert!(allowed.iter().any(|a| a == s), "{s}");
        }
        assert!(names(&p, LinuxSeccompAction::ScmpActErrno).is_empty());
    }

    #[test]
    fn default_profile_serializes_like_docker() {
        let p = default_profile(&default_capabilities());
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(json["syscalls"][0]["action"], "SCMP_ACT_ALLOW");
        let clone = json["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["names"][0] == "clone")
            .unwrap();
        assert_eq!(clone["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
        assert_eq!(clone["args"][0]["valueTwo"], 0);
    }

    fn sp(kind: ProfileType, r: &str) -> cri::SecurityProfile {
        cri::SecurityProfile {
            profile_type: kind as i32,
            localhost_ref: r.into(),
        }
    }

    #[test]
    fn choices_follow_the_security_context() {
        let c = |p: Option<&cri::SecurityProfile>, path: &str| choose(p, path, "sc");
        assert_eq!(c(None, "").unwrap(), Choice::Unconfined);
        assert_eq!(c(None, "runtime/default").unwrap(), Choice::RuntimeDefault);
        assert_eq!(c(None, "docker/default").unwrap(), Choice::RuntimeDefault);
        assert_eq!(c(None, "unconfined").unwrap(), Choice::Unconfined);
        assert_eq!(
            c(None, "localhost//x/p.json").unwrap(),
            Choice::Localhost("/x/p.json".into())
        );
        assert!(c(None, "bogus").is_err());
        // The structured field wins over the deprecated path.
        let rd = sp(ProfileType::RuntimeDefault, "");
        assert_eq!(c(Some(&rd), "unconfined").unwrap(), Choice::RuntimeDefault);
        let un = sp(ProfileType::Unconfined, "");
        assert_eq!(c(Some(&un), "").unwrap(), Choice::Unconfined);
        let lh = sp(ProfileType::Localhost, "/p.json");
        assert_eq!(
            c(Some(&lh), "").unwrap(),
            Choice::Localhost("/p.json".into())
        );
        let err = c(Some(&sp(ProfileType::RuntimeDefault, "/p.json")), "").unwrap_err();
        assert!(
            err.to_string()
                .contains("only allowed with profile type Localhost")
        );
        assert!(c(Some(&sp(ProfileType::Localhost, "")), "").is_err());
        let odd = cri::SecurityProfile {
            profile_type: 9,
            localhost_ref: String::new(),
        };
        assert!(c(Some(&odd), "").is_err());
    }

    #[test]
    fn localhost_profiles_load_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("block-chmod.json");
        std::fs::write(
            &path,
            r#"{"defaultAction": "SCMP_ACT_ALLOW",
                "syscalls": [{"names": ["chmod", "fchmodat"], "action": "SCMP_ACT_ERRNO"}]}"#,
        )
        .unwrap();
        let mut spec = super::super::defaults::default_spec();
        apply(&mut spec, &Choice::Localhost(path.clone()), false, "sc").unwrap();
        let s = spec.linux().as_ref().unwrap().seccomp().as_ref().unwrap();
        assert_eq!(s.default_action(), LinuxSeccompAction::ScmpActAllow);
        assert_eq!(
            s.syscalls().as_ref().unwrap()[0].names(),
            &["chmod", "fchmodat"]
        );

        // Privileged ignores it; missing or malformed files are the caller's error.
        apply(&mut spec, &Choice::Localhost(path.clone()), true, "sc").unwrap();
        assert!(spec.linux().as_ref().unwrap().seccomp().is_none());
        let missing = Choice::Localhost(dir.path().join("nope.json"));
        let err = apply(&mut spec, &missing, false, "sc").unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        std::fs::write(&path, "{not json").unwrap();
        assert!(apply(&mut spec, &Choice::Localhost(path), false, "sc").is_err());
    }

    #[test]
    fn runtime_default_and_unconfined_apply() {
        let mut spec = super::super::defaults::default_spec();
        apply(&mut spec, &Choice::RuntimeDefault, false, "sc").unwrap();
        assert!(spec.linux().as_ref().unwrap().seccomp().is_some());
        apply(&mut spec, &Choice::Unconfined, false, "sc").unwrap();
        assert!(spec.linux().as_ref().unwrap().seccomp().is_none());
    }
}
