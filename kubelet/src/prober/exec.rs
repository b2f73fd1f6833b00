//! Exec probes, as the Go kubelet's `probe/exec` over CRI `ExecSync`: exit 0 is success, any
//! other exit a failure, a command outliving the probe's timeout a failure too; the output is
//! stdout then stderr, at most 10 KiB.

use std::collections::HashMap;
use std::time::Duration;

use ferrolet_proto::cri::ExecSyncResponse;
use k8s_openapi::api::core::v1::Container;

use super::check::{CheckError, Outcome};
use crate::cri::{Cri, CriError};

/// Output kept of a probe's command (Go's `maxReadLength`).
pub const MAX_OUTPUT: usize = 10 * 1024;

/// The command with `$(VAR)` references to the container's plain `value` env expanded (Go's
/// `ExpandContainerCommandOnlyStatic`: `valueFrom` variables expand to nothing).
pub fn expand_static(command: &[String], container: &Container) -> Vec<String> {
    let env: HashMap<&str, &str> = container
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or_default()))
        .collect();
    command
        .iter()
        .map(|arg| crate::podspec::env::expand(arg, |name| env.get(name).map(|v| v.to_string())))
        .collect()
}

/// Runs `cmd` in the container through CRI within `timeout`.
pub async fn probe(
    cri: &Cri,
    container_id: &str,
    cmd: Vec<String>,
    timeout: Duration,
) -> Result<(Outcome, String), CheckError> {
    let secs = i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX);
    let answer = cri.exec_sync(container_id, cmd.clone(), secs).await;
    verdict(&cmd, answer)
}

/// Whether a CRI exec error is the command's timeout (the runtime answers DeadlineExceeded,
/// or our own bound on the call passed).
pub fn is_timeout(e: &CriError) -> bool {
    matches!(e, CriError::Timeout { .. }) || e.code() == Some(tonic::Code::DeadlineExceeded)
}

/// The probe's verdict on an ExecSync answer.
pub fn verdict(
    cmd: &[String],
    answer: Result<ExecSyncResponse, CriError>,
) -> Result<(Outcome, String), CheckError> {
    match answer {
        Ok(resp) => {
            let output = combined_output(&resp);
            let outcome = if resp.exit_code == 0 {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            Ok((outcome, output))
        }
        Err(e) if is_timeout(&e) => Ok((
            Outcome::Failure,
            format!(
                "command {} timed out",
                crate::podspec::env::go_quote(&cmd.join(" "))
            ),
        )),
        Err(e) => Err(CheckError::Cri(e)),
    }
}

/// Stdout then stderr, cut at [`MAX_OUTPUT`] bytes.
pub fn combined_output(resp: &ExecSyncResponse) -> String {
    let out: Vec<u8> = resp
        .stdout
        .iter()
        .chain(resp.stderr.iter())
        .take(MAX_OUTPUT)
        .copied()
        .collect();
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};

    fn resp(code: i32, stdout: &str, stderr: &str) -> ExecSyncResponse {
        ExecSyncResponse {
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            exit_code: code,
        }
    }

    fn cmd(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn exit_codes_decide_and_output_is_stdout_then_stderr() {
        let c = cmd(&["test", "-f", "/tmp/healthy"]);
        let ok = verdict(&c, Ok(resp(0, "out\n", "err\n"))).unwrap();
        assert_eq!(ok, (Outcome::Success, "out\nerr\n".into()));
        let bad = verdict(&c, Ok(resp(1, "", "no\n"))).unwrap();
        assert_eq!(bad, (Outcome::Failure, "no\n".into()));
    }

    #[test]
    fn timeouts_fail_and_other_errors_are_errors() {
        let c = cmd(&["sleep", "10"]);
        let deadline = CriError::Call {
            method: "ExecSync",
            status: tonic::Status::deadline_exceeded("timeout 1s exceeded"),
        };
        assert_eq!(
            verdict(&c, Err(deadline)).unwrap(),
            (Outcome::Failure, "command \"sleep 10\" timed out".into())
        );
        let ours = CriError::Timeout {
            method: "ExecSync",
            timeout: Duration::from_secs(3),
        };
        assert_eq!(verdict(&c, Err(ours)).unwrap().0, Outcome::Failure);
        let gone = CriError::Call {
            method: "ExecSync",
            status: tonic::Status::not_found("no such container"),
        };
        assert!(matches!(verdict(&c, Err(gone)), Err(CheckError::Cri(_))));
    }

    #[test]
    fn output_is_capped() {
        let big = "x".repeat(MAX_OUTPUT);
        let got = combined_output(&resp(0, &big, "tail"));
        assert_eq!(got.len(), MAX_OUTPUT);
        assert!(!got.contains("tail"));
    }

    #[test]
    fn only_plain_values_expand() {
        let c = Container {
            env: Some(vec![
                EnvVar {
                    name: "FILE".into(),
                    value: Some("/tmp/ok".into()),
                    ..Default::default()
                },
                EnvVar {
                    name: "POD".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.name".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(
            expand_static(
                &cmd(&["test", "-f", "$(FILE)", "$(POD)", "$(NONE)", "$$(FILE)"]),
                &c
            ),
            cmd(&["test", "-f", "/tmp/ok", "", "$(NONE)", "$(FILE)"])
        );
    }
}
