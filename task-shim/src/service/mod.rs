//! The Task service: containerd's calls on the pod's containers, and what happens when their
//! processes exit. Runs on the event loop's one thread; runtime commands run to completion
//! inside a call (a pod's calls are few and containerd makes them one at a time per task).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferrolet_proto::containerd::events::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskIo, TaskOom, TaskPaused,
    TaskResumed, TaskStart,
};
use ferrolet_proto::containerd::to_any;
use ferrolet_proto::task_shim as api;
use mio::Registry;
use prost::Message;

mod polled;

pub use polled::{close_stdin, finish_pump};

use crate::cgroup::Cgroup;
use crate::error::{CallError, Code, invalid, not_found, precondition, unknown};
use crate::io::ProcessIo;
use crate::publisher::Publisher;
use crate::runtime::Runtime;
use crate::task::{BundleSpec, Container, Process, State, StdioNames, Waiter};

/// A call's answer: now, or when a process exits (`Wait`).
pub enum Reply {
    /// The encoded response, or the failure.
    Now(Result<Vec<u8>, CallError>),
    /// Parked; answered by [`Shim::on_exit`].
    Later,
}

/// Answers to send for parked calls: (connection, stream, encoded response).
pub type Answer = (usize, u32, Vec<u8>);

/// The shim's state.
pub struct Shim {
    /// containerd namespace.
    pub namespace: String,
    /// Containers by id.
    pub containers: BTreeMap<String, Container>,
    /// Event publisher.
    pub publisher: Publisher,
    /// Poll registry, for stdio pumps and OOM watches.
    pub registry: Registry,
    /// Tokens of pumps and OOM watches: token → (container, exec id, what).
    pub sources: std::collections::HashMap<usize, crate::io::Source>,
    next_token: usize,
    /// Answers for parked `Wait` calls, collected for the loop to send.
    pub answers: Vec<Answer>,
    /// containerd called `Shutdown` with no containers left.
    pub shutdown_requested: bool,
}

fn decode<M: Message + Default>(payload: &[u8]) -> Result<M, CallError> {
    M::decode(payload).map_err(|e| invalid(format!("decoding request: {e}")))
}

fn valid_id(id: &str, what: &str) -> Result<(), CallError> {
    if id.is_empty() || id.len() > 256 || id.contains('/') || id == "." || id == ".." {
        return Err(invalid(format!("invalid {what} {id:?}")));
    }
    Ok(())
}

impl Shim {
    /// A shim with no containers.
    pub fn new(namespace: String, publisher: Publisher, registry: Registry) -> Self {
        Self {
            namespace,
            containers: BTreeMap::new(),
            publisher,
            registry,
            sources: Default::default(),
            next_token: 16,
            answers: Vec::new(),
            shutdown_requested: false,
        }
    }

    /// A fresh poll token.
    pub fn token(&mut self) -> usize {
        self.next_token += 1;
        self.next_token
    }

    fn publish(&mut self, topic: &str, event: prost_types::Any) {
        self.publisher.publish(&self.registry, topic, event);
    }

    fn container(&self, id: &str) -> Result<&Container, CallError> {
        self.containers
            .get(id)
            .ok_or_else(|| not_found(format!("container {id}: not found")))
    }

    fn container_mut(&mut self, id: &str) -> Result<&mut Container, CallError> {
        self.containers
            .get_mut(id)
            .ok_or_else(|| not_found(format!("container {id}: not found")))
    }

    fn process(&self, id: &str, exec_id: &str) -> Result<(&Container, &Process), CallError> {
        let c = self.container(id)?;
        let p = c.process(exec_id).ok_or_else(|| no_process(id, exec_id))?;
        Ok((c, p))
    }

    fn process_mut(&mut self, id: &str, exec_id: &str) -> Result<&mut Process, CallError> {
        self.container_mut(id)?
            .process_mut(exec_id)
            .ok_or_else(|| no_process(id, exec_id))
    }

    /// Runs one call.
    pub fn dispatch(&mut self, conn: usize, stream: u32, method: &str, payload: &[u8]) -> Reply {
        fn enc<M: Message>(r: Result<M, CallError>) -> Result<Vec<u8>, CallError> {
            r.map(|m| m.encode_to_vec())
        }
        fn empty(r: Result<(), CallError>) -> Result<Vec<u8>, CallError> {
            r.map(|()| Vec::new())
        }
        let result = match method {
            "Create" => enc(decode(payload).and_then(|r| self.create(r))),
            "Start" => enc(decode(payload).and_then(|r| self.start(r))),
            "Delete" => enc(decode(payload).and_then(|r| self.delete(r))),
            "State" => enc(decode(payload).and_then(|r| self.state(r))),
            "Kill" => empty(decode(payload).and_then(|r| self.kill(r))),
            "Exec" => empty(decode(payload).and_then(|r| self.exec(r))),
            "ResizePty" => empty(decode(payload).and_then(|r| self.resize_pty(r))),
            "CloseIO" => empty(decode(payload).and_then(|r| self.close_io(r))),
            "Pids" => enc(decode(payload).and_then(|r| self.pids(r))),
            "Pause" => empty(decode(payload).and_then(|r| self.pause(r, true))),
            "Resume" => empty(decode(payload).and_then(|r| self.pause(r, false))),
            "Update" => empty(decode(payload).and_then(|r| self.update(r))),
            "Stats" => enc(decode(payload).and_then(|r| self.stats(r))),
            "Connect" => enc(decode(payload).and_then(|r| self.connect(r))),
            "Wait" => {
                match decode::<api::WaitRequest>(payload).and_then(|r| self.wait(conn, stream, r)) {
                    Ok(Some(resp)) => Ok(resp.encode_to_vec()),
                    Ok(None) => return Reply::Later,
                    Err(e) => Err(e),
                }
            }
            // Answered by the loop, which decides whether the shim can go.
            "Shutdown" => Ok(Vec::new()),
            "Checkpoint" => Err(CallError::new(
                Code::Unimplemented,
                "checkpoint is not supported by io.containerd.ferrolet.v1",
            )),
            other => Err(CallError::new(
                Code::Unimplemented,
                format!("method {other} is not implemented"),
            )),
        };
        Reply::Now(result)
    }

    fn create(&mut self, r: api::CreateTaskRequest) -> Result<api::CreateTaskResponse, CallError> {
        valid_id(&r.id, "container id")?;
        if self.containers.contains_key(&r.id) {
            return Err(CallError::new(
                Code::AlreadyExists,
                format!("container {}: already exists", r.id),
            ));
        }
        if !r.checkpoint.is_empty() {
            return Err(CallError::new(
                Code::Unimplemented,
                "restoring from a checkpoint is not supported by io.containerd.ferrolet.v1",
            ));
        }
        let options = match &r.options {
            Some(any) if !any.value.is_empty() => {
                if !any.type_url.ends_with(api::RUNC_OPTIONS_TYPE) {
                    return Err(invalid(format!(
                        "task options of type {:?}: only {} is understood",
                        any.type_url,
                        api::RUNC_OPTIONS_TYPE
                    )));
                }
                decode::<api::RuncOptions>(&any.value)?
            }
            _ => api::RuncOptions::default(),
        };
        let runtime = Runtime::from_options(&options, &self.namespace);
        let bundle = PathBuf::from(&r.bundle);
        let spec = BundleSpec::read(&bundle)
            .map_err(|e| invalid(format!("reading {}/config.json: {e}", bundle.display())))?;
        crate::cleanup::write_runtime(&bundle, &runtime)
            .map_err(|e| unknown(format!("writing the runtime options of {}: {e}", r.id)))?;
        let rootfs = bundle.join("rootfs");
        let mounted = !r.rootfs.is_empty();
        if mounted {
            std::fs::create_dir_all(&rootfs)
                .map_err(|e| unknown(format!("creating {}: {e}", rootfs.display())))?;
            crate::rootfs::mount_all(&r.rootfs, &rootfs)
                .map_err(|e| unknown(format!("failed to mount rootfs component: {e}")))?;
        }
        let stdio = StdioNames {
            stdin: r.stdin.clone(),
            stdout: r.stdout.clone(),
            stderr: r.stderr.clone(),
            terminal: r.terminal,
        };
        let undo_mount = |e: CallError| {
            if mounted {
                let _ = crate::rootfs::unmount_all(&rootfs);
            }
            e
        };
        let mut io = ProcessIo::open(&stdio, &r.id, &self.namespace)
            .map_err(|e| undo_mount(unknown(format!("failed to create {} io: {e}", r.id))))?;
        let pid_file = bundle.join("init.pid");
        let fds = io.take_runtime_fds();
        runtime
            .create(&r.id, &bundle, &pid_file, io.console_path(), fds)
            .map_err(|e| undo_mount(unknown(format!("OCI runtime create failed: {e}"))))?;
        let mut init = Process::new("", stdio.clone());
        let started = io.finish(&mut init).and_then(|()| read_pid(&pid_file));
        let pid = match started {
            Ok(pid) => pid,
            Err(e) => {
                let _ = runtime.delete(&bundle, &r.id, true);
                return Err(undo_mount(unknown(format!(
                    "OCI runtime create failed: {e}"
                ))));
            }
        };
        init.pid = pid;
        let cgroup = Cgroup::of_pid(pid);
        let oom = cgroup.as_ref().and_then(Cgroup::watch_oom);
        let token = self.token();
        let mut container = Container {
            id: r.id.clone(),
            bundle: bundle.clone(),
            runtime,
            init,
            execs: BTreeMap::new(),
            cgroup,
            oom,
            rootfs_mounted: mounted,
            kill_all_on_exit: spec.shares_pid_namespace(),
            token,
        };
        polled::register_container(self, &mut container);
        self.containers.insert(r.id.clone(), container);
        self.publish(
            "/tasks/create",
            to_any(&TaskCreate {
                container_id: r.id.clone(),
                bundle: r.bundle.clone(),
                rootfs: r.rootfs.clone(),
                io: Some(TaskIo {
                    stdin: stdio.stdin,
                    stdout: stdio.stdout,
                    stderr: stdio.stderr,
                    terminal: stdio.terminal,
                }),
                checkpoint: String::new(),
                pid,
            }),
        );
        crate::log::debug("created", &[("id", &r.id), ("pid", &pid.to_string())]);
        Ok(api::CreateTaskResponse { pid })
    }

    fn start(&mut self, r: api::StartRequest) -> Result<api::StartResponse, CallError> {
        if r.exec_id.is_empty() {
            let c = self.container_mut(&r.id)?;
            if c.init.state != State::Created {
                return Err(precondition(format!(
                    "container {} cannot be started: it is {:?}",
                    r.id, c.init.state
                )));
            }
            c.runtime
                .start(&c.bundle, &r.id, c.init.pid)
                .map_err(|e| unknown(format!("OCI runtime start failed: {e}")))?;
            c.init.state = State::Running;
            let pid = c.init.pid;
            self.publish(
                "/tasks/start",
                to_any(&TaskStart {
                    container_id: r.id,
                    pid,
                }),
            );
            return Ok(api::StartResponse { pid });
        }
        let pid = self.start_exec(&r.id, &r.exec_id)?;
        self.publish(
            "/tasks/exec-started",
            to_any(&TaskExecStarted {
                container_id: r.id,
                exec_id: r.exec_id,
                pid,
            }),
        );
        Ok(api::StartResponse { pid })
    }

    fn start_exec(&mut self, id: &str, exec_id: &str) -> Result<u32, CallError> {
        let c = self.container(id)?;
        if !c.init.alive() {
            return Err(precondition(format!("container {id} is not running")));
        }
        let e = c
            .execs
            .get(exec_id)
            .ok_or_else(|| no_process(id, exec_id))?;
        if e.state != State::Created || e.pid != 0 {
            return Err(precondition(format!(
                "process {exec_id} of container {id} was already started"
            )));
        }
        let (bundle, runtime, stdio, spec) = (
            c.bundle.clone(),
            c.runtime.clone(),
            e.stdio.clone(),
            e.spec.clone(),
        );
        let spec_file = bundle.join(format!(".exec-{exec_id}.json"));
        let pid_file = bundle.join(format!(".exec-{exec_id}.pid"));
        std::fs::write(&spec_file, &spec)
            .map_err(|e| unknown(format!("writing {}: {e}", spec_file.display())))?;
        let result = (|| {
            let mut io = ProcessIo::open(&stdio, id, &self.namespace)
                .map_err(|e| unknown(format!("failed to create exec {exec_id} io: {e}")))?;
            let fds = io.take_runtime_fds();
            runtime
                .exec(id, &bundle, &spec_file, &pid_file, io.console_path(), fds)
                .map_err(|e| unknown(format!("OCI runtime exec failed: {e}")))?;
            let pid = read_pid(&pid_file)
                .map_err(|e| unknown(format!("OCI runtime exec failed: {e}")))?;
            Ok((io, pid))
        })();
        let _ = std::fs::remove_file(&spec_file);
        let _ = std::fs::remove_file(&pid_file);
        let (io, pid) = result?;
        let mut c = self
            .containers
            .remove(id)
            .ok_or_else(|| not_found(id.to_string()))?;
        let finished = c.execs.get_mut(exec_id).map(|e| {
            e.pid = pid;
            e.state = State::Running;
            e.spec = Vec::new();
            io.finish(e)
        });
        polled::register_process(self, id, &mut c, exec_id);
        self.containers.insert(id.to_string(), c);
        if let Some(Err(e)) = finished {
            crate::log::warn(
                "exec terminal",
                &[("id", id), ("exec", exec_id), ("error", &e.to_string())],
            );
        }
        Ok(pid)
    }

    fn delete(&mut self, r: api::DeleteRequest) -> Result<api::DeleteResponse, CallError> {
        if !r.exec_id.is_empty() {
            let c = self.container_mut(&r.id)?;
            let e = c
                .execs
                .get(&r.exec_id)
                .ok_or_else(|| no_process(&r.id, &r.exec_id))?;
            if e.alive() {
                return Err(precondition(format!(
                    "cannot delete a running process: {} of container {}",
                    r.exec_id, r.id
                )));
            }
            let mut e = c.execs.remove(&r.exec_id);
            if let Some(e) = e.as_mut() {
                answer_waiters(&mut self.answers, e);
            }
            let resp = e.as_ref().map(|e| api::DeleteResponse {
                pid: e.pid,
                exit_status: e.exit_status(),
                exited_at: e.exited_at(),
            });
            if let Some(e) = e {
                polled::release_process(self, &r.id, e);
            }
            return Ok(resp.unwrap_or_default());
        }
        let c = self.container(&r.id)?;
        let running = c.init.alive() && c.init.state != State::Created;
        if running {
            return Err(precondition(format!(
                "cannot delete a running process: container {}",
                r.id
            )));
        }
        let force = c.init.state == State::Created;
        if let Err(e) = c.runtime.delete(&c.bundle, &r.id, force) {
            let msg = e.to_string();
            if !msg.contains("does not exist") && !msg.contains("not found") {
                return Err(unknown(format!("OCI runtime delete failed: {msg}")));
            }
        }
        if c.rootfs_mounted {
            let rootfs = c.bundle.join("rootfs");
            crate::rootfs::unmount_all(&rootfs)
                .map_err(|e| unknown(format!("unmounting {}: {e}", rootfs.display())))?;
        }
        let Some(mut c) = self.containers.remove(&r.id) else {
            return Err(not_found(format!("container {}: not found", r.id)));
        };
        // A created init killed by the delete: it did not exit on its own, but it is gone.
        if c.init.exit.is_none() {
            c.init.exit = Some((137, crate::time::now()));
            c.init.state = State::Stopped;
        }
        let resp = api::DeleteResponse {
            pid: c.init.pid,
            exit_status: c.init.exit_status(),
            exited_at: c.init.exited_at(),
        };
        // Waits on what goes now would otherwise never be answered.
        answer_waiters(&mut self.answers, &mut c.init);
        for e in c.execs.values_mut() {
            answer_waiters(&mut self.answers, e);
        }
        polled::release_container(self, c);
        self.publish(
            "/tasks/delete",
            to_any(&TaskDelete {
                container_id: r.id.clone(),
                pid: resp.pid,
                exit_status: resp.exit_status,
                exited_at: resp.exited_at,
                // The Go shim leaves the process id out of TaskDelete.
                id: String::new(),
            }),
        );
        Ok(resp)
    }

    fn state(&mut self, r: api::StateRequest) -> Result<api::StateResponse, CallError> {
        let (c, p) = self.process(&r.id, &r.exec_id)?;
        Ok(api::StateResponse {
            id: if r.exec_id.is_empty() {
                r.id.clone()
            } else {
                r.exec_id.clone()
            },
            bundle: c.bundle.display().to_string(),
            pid: p.pid,
            status: p.state.status() as i32,
            stdin: p.stdio.stdin.clone(),
            stdout: p.stdio.stdout.clone(),
            stderr: p.stdio.stderr.clone(),
            terminal: p.stdio.terminal,
            exit_status: p.exit_status(),
            exited_at: p.exited_at(),
            exec_id: r.exec_id,
        })
    }

    fn kill(&mut self, r: api::KillRequest) -> Result<(), CallError> {
        let (c, p) = self.process(&r.id, &r.exec_id)?;
        if p.state == State::Stopped {
            return Err(not_found("process already finished"));
        }
        if !r.exec_id.is_empty() {
            if p.pid == 0 {
                return Err(precondition(format!(
                    "process {} of container {} has not started",
                    r.exec_id, r.id
                )));
            }
            let sig =
                i32::try_from(r.signal).map_err(|_| invalid(format!("signal {}", r.signal)))?;
            // SAFETY: kill(2) with a pid this shim reaps (so it cannot be reused unseen).
            if unsafe { libc::kill(p.pid as i32, sig) } < 0 {
                let err = std::io::Error::last_os_error();
                return Err(if err.raw_os_error() == Some(libc::ESRCH) {
                    not_found("process already finished")
                } else {
                    unknown(format!("killing process {}: {err}", r.exec_id))
                });
            }
            return Ok(());
        }
        c.runtime
            .kill(&c.bundle, &r.id, r.signal, r.all)
            .map_err(|e| {
                let msg = e.to_string();
                if [
                    "not running",
                    "no such process",
                    "process already finished",
                    "does not exist",
                ]
                .iter()
                .any(|s| msg.contains(s))
                {
                    not_found("process already finished")
                } else {
                    unknown(format!("unknown error after kill: {msg}"))
                }
            })
    }

    fn exec(&mut self, r: api::ExecProcessRequest) -> Result<(), CallError> {
        valid_id(&r.exec_id, "exec id")?;
        let c = self.container_mut(&r.id)?;
        if c.execs.contains_key(&r.exec_id) {
            return Err(CallError::new(
                Code::AlreadyExists,
                format!("id {}: already exists", r.exec_id),
            ));
        }
        if c.init.state == State::Stopped {
            return Err(precondition(format!("container {} is not running", r.id)));
        }
        let spec = r
            .spec
            .map(|s| s.value)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| invalid(format!("exec {} has no process spec", r.exec_id)))?;
        let mut p = Process::new(
            &r.exec_id,
            StdioNames {
                stdin: r.stdin,
                stdout: r.stdout,
                stderr: r.stderr,
                terminal: r.terminal,
            },
        );
        p.spec = spec;
        c.execs.insert(r.exec_id.clone(), p);
        self.publish(
            "/tasks/exec-added",
            to_any(&TaskExecAdded {
                container_id: r.id,
                exec_id: r.exec_id,
            }),
        );
        Ok(())
    }

    fn resize_pty(&mut self, r: api::ResizePtyRequest) -> Result<(), CallError> {
        let p = self.process_mut(&r.id, &r.exec_id)?;
        let console = p.console.as_ref().ok_or_else(|| {
            precondition(format!(
                "process {} of container {} has no terminal",
                r.exec_id, r.id
            ))
        })?;
        crate::console::resize(console, r.width, r.height)
            .map_err(|e| unknown(format!("resizing the terminal of {}: {e}", r.id)))
    }

    fn close_io(&mut self, r: api::CloseIoRequest) -> Result<(), CallError> {
        if !r.stdin {
            return Ok(());
        }
        self.process_mut(&r.id, &r.exec_id)?;
        polled::close_stdin(self, &r.id, &r.exec_id, true);
        Ok(())
    }

    fn pids(&mut self, r: api::ContainerRef) -> Result<api::PidsResponse, CallError> {
        let c = self.container(&r.id)?;
        let pids = c.cgroup.as_ref().map(Cgroup::pids).unwrap_or_default();
        let processes = pids
            .into_iter()
            .map(|pid| api::ProcessInfo {
                pid,
                info: c
                    .execs
                    .values()
                    .find(|e| e.pid == pid && pid != 0)
                    .map(|e| prost_types::Any {
                        type_url: "containerd.runc.v1.ProcessDetails".to_string(),
                        value: api::ProcessDetails {
                            exec_id: e.exec_id.clone(),
                        }
                        .encode_to_vec(),
                    }),
            })
            .collect();
        Ok(api::PidsResponse { processes })
    }

    fn pause(&mut self, r: api::ContainerRef, pause: bool) -> Result<(), CallError> {
        let c = self.container_mut(&r.id)?;
        let (verb, from, to) = if pause {
            ("pause", State::Running, State::Paused)
        } else {
            ("resume", State::Paused, State::Running)
        };
        if c.init.state != from {
            return Err(precondition(format!(
                "container {} cannot {verb}: it is {:?}",
                r.id, c.init.state
            )));
        }
        c.runtime
            .simple(&c.bundle, &[verb], &r.id)
            .map_err(|e| unknown(format!("OCI runtime {verb} failed: {e}")))?;
        c.init.state = to;
        let id = r.id;
        if pause {
            self.publish("/tasks/paused", to_any(&TaskPaused { container_id: id }));
        } else {
            self.publish("/tasks/resumed", to_any(&TaskResumed { container_id: id }));
        }
        Ok(())
    }

    fn update(&mut self, r: api::UpdateTaskRequest) -> Result<(), CallError> {
        let c = self.container(&r.id)?;
        let resources = r
            .resources
            .map(|a| a.value)
            .ok_or_else(|| invalid(format!("update of {} has no resources", r.id)))?;
        c.runtime
            .update(&c.bundle, &r.id, &resources)
            .map_err(|e| unknown(format!("OCI runtime update failed: {e}")))
    }

    fn stats(&mut self, r: api::ContainerRef) -> Result<api::StatsResponse, CallError> {
        let c = self.container(&r.id)?;
        let cgroup = c
            .cgroup
            .as_ref()
            .ok_or_else(|| not_found(format!("container {} has no cgroup", r.id)))?;
        Ok(api::StatsResponse {
            stats: Some(cgroup.stats()),
        })
    }

    fn connect(&mut self, r: api::ContainerRef) -> Result<api::ConnectResponse, CallError> {
        Ok(api::ConnectResponse {
            shim_pid: std::process::id(),
            task_pid: self.containers.get(&r.id).map_or(0, |c| c.init.pid),
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
    }

    fn wait(
        &mut self,
        conn: usize,
        stream: u32,
        r: api::WaitRequest,
    ) -> Result<Option<api::WaitResponse>, CallError> {
        let p = self.process_mut(&r.id, &r.exec_id)?;
        if p.exit_published {
            return Ok(Some(api::WaitResponse {
                exit_status: p.exit_status(),
                exited_at: p.exited_at(),
            }));
        }
        p.waiters.push((conn, stream));
        Ok(None)
    }

    /// Whether nothing is left to serve.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty()
    }

    /// A reaped child: records the exit of the process it was and tells containerd.
    pub fn on_exit(&mut self, pid: u32, status: u32) {
        let now = crate::time::now();
        let Some(id) = self
            .containers
            .values()
            .find(|c| {
                (c.init.pid == pid && c.init.exit.is_none())
                    || c.execs.values().any(|e| e.pid == pid && e.exit.is_none())
            })
            .map(|c| c.id.clone())
        else {
            // A runtime helper, a logging binary or a process of a deleted task.
            return;
        };
        let Some(c) = self.containers.get_mut(&id) else {
            return;
        };
        if c.init.pid == pid && c.init.exit.is_none() {
            c.init.exit = Some((status, now));
            c.init.state = State::Stopped;
            if c.kill_all_on_exit {
                // Its PID namespace is shared: the kernel leaves the rest of the cgroup alive.
                let _ = c.runtime.kill(&c.bundle, &id, libc::SIGKILL as u32, true);
            }
            polled::close_stdin(self, &id, "", false);
        } else if let Some(e) = c
            .execs
            .values_mut()
            .find(|e| e.pid == pid && e.exit.is_none())
        {
            e.exit = Some((status, now));
            e.state = State::Stopped;
            let exec_id = e.exec_id.clone();
            polled::close_stdin(self, &id, &exec_id, false);
            self.publish_exit(&id, &exec_id);
        }
        // The init's exit is told after its execs' (containerd and CRI expect them first).
        if let Some(c) = self.containers.get(&id)
            && c.init.exit.is_some()
            && !c.init.exit_published
            && !c.execs_running()
        {
            self.publish_exit(&id, "");
        }
    }

    /// Sends TaskExit for a stopped process and answers its waiters.
    fn publish_exit(&mut self, id: &str, exec_id: &str) {
        let Some(p) = self
            .containers
            .get_mut(id)
            .and_then(|c| c.process_mut(exec_id))
        else {
            return;
        };
        p.exit_published = true;
        let event = TaskExit {
            container_id: id.to_string(),
            id: if exec_id.is_empty() {
                id.to_string()
            } else {
                exec_id.to_string()
            },
            pid: p.pid,
            exit_status: p.exit_status(),
            exited_at: p.exited_at(),
        };
        answer_waiters(&mut self.answers, p);
        self.publish("/tasks/exit", to_any(&event));
    }

    /// The kernel OOM-killed something in container `id`'s cgroup.
    pub fn on_oom(&mut self, id: &str) {
        self.publish(
            "/tasks/oom",
            to_any(&TaskOom {
                container_id: id.to_string(),
            }),
        );
    }

    /// Drops parked waits of a closed connection.
    pub fn forget_connection(&mut self, conn: usize) {
        for c in self.containers.values_mut() {
            c.init.waiters.retain(|w: &Waiter| w.0 != conn);
            for e in c.execs.values_mut() {
                e.waiters.retain(|w| w.0 != conn);
            }
        }
    }
}

/// Queues answers to `p`'s parked waits with its exit (or "killed" when it never exited).
fn answer_waiters(answers: &mut Vec<Answer>, p: &mut Process) {
    let answer = api::WaitResponse {
        exit_status: p.exit.as_ref().map_or(137, |e| e.0),
        exited_at: Some(p.exited_at().unwrap_or_else(crate::time::now)),
    }
    .encode_to_vec();
    for (conn, stream) in std::mem::take(&mut p.waiters) {
        answers.push((conn, stream, answer.clone()));
    }
}

fn no_process(id: &str, exec_id: &str) -> CallError {
    not_found(format!("process {exec_id} of container {id}: not found"))
}

fn read_pid(path: &Path) -> Result<u32, CallError> {
    std::fs::read_to_string(path)
        .map_err(|e| unknown(format!("reading {}: {e}", path.display())))?
        .trim()
        .parse()
        .map_err(|e| unknown(format!("reading {}: {e}", path.display())))
}
