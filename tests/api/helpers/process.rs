//! The real `condenser` binary as a child process, for what only a process
//! shows: environment variables, signals, log output.

use super::wait::{wait_until_blocking, PATIENCE};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct ProxyProcess {
    pub child: Child,
    pub address: String,
    pub logs: Arc<Mutex<Vec<String>>>,
    /// Set once the process's stderr is closed: every line is in `logs`.
    logs_ended: Arc<AtomicBool>,
    _workdir: tempfile::TempDir,
}

pub fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_condenser"))
}

impl ProxyProcess {
    /// Starts `condenser serve` with JSON logs in a fresh working directory
    /// and waits for its "listening" line.
    pub fn start(env: &[(&str, &str)]) -> ProxyProcess {
        let mut command = binary();
        command.arg("serve");
        Self::start_command(command, env)
    }

    /// Starts it under a soft open-file limit of `soft` (the hard limit
    /// unchanged), as a distribution's default of 1,024 would.
    pub fn start_with_soft_fd_limit(env: &[(&str, &str)], soft: u64) -> ProxyProcess {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!(r#"ulimit -Sn {soft} && exec "$0" serve"#))
            .arg(env!("CARGO_BIN_EXE_condenser"));
        Self::start_command(command, env)
    }

    fn start_command(mut command: Command, env: &[(&str, &str)]) -> ProxyProcess {
        let workdir = tempfile::tempdir().expect("temp dir");
        command
            .current_dir(workdir.path())
            .env("CONDENSER_LISTEN", "127.0.0.1:0")
            .env("CONDENSER_LOG_FORMAT", "json")
            .env("RUST_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("condenser starts");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().expect("piped stderr");
        let sink = logs.clone();
        let logs_ended = Arc::new(AtomicBool::new(false));
        let ended = logs_ended.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(address) = listening_address(&line) {
                    let _ = address_tx.send(address);
                }
                sink.lock().expect("log lock").push(line);
            }
            ended.store(true, Ordering::Release);
        });
        let address = address_rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!(
                    "condenser did not start listening; logs: {:?}",
                    logs.lock().expect("log lock")
                )
            });
        ProxyProcess {
            child,
            address: format!("http://{address}"),
            logs,
            logs_ended,
            _workdir: workdir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status();
        assert!(status.expect("kill runs").success());
    }

    /// Waits for exit, at most `limit`; returns the exit status if it exited.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// File descriptors the process holds now.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .expect("the process is alive")
            .count()
    }

    /// Stops the process as a service manager would (SIGTERM) and waits
    /// until it has exited and its last log line is read: whatever it had
    /// left to do is done, and logged.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        let status = self.wait_exit(PATIENCE).expect("exits on SIGTERM");
        wait_until_blocking(PATIENCE, "the end of the process's logs", || {
            self.logs_ended.load(Ordering::Acquire)
        });
        status
    }

    pub fn log_text(&self) -> String {
        self.logs.lock().expect("log lock").join("\n")
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn listening_address(line: &str) -> Option<String> {
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    if event["message"] != "condenser listening" {
        return None;
    }
    event["address"].as_str().map(str::to_string)
}

impl ProxyProcess {
    /// Starts it with both open-file limits at `limit`, as a container or a
    /// service manager that sets 1,024 hard would: the connection cap is then
    /// (`limit` − 64) / 2.
    pub fn start_with_fd_limit(env: &[(&str, &str)], limit: u64) -> ProxyProcess {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!(r#"ulimit -n {limit} && exec "$0" serve"#))
            .arg(env!("CARGO_BIN_EXE_condenser"));
        Self::start_command(command, env)
    }

    /// The value of the Prometheus sample `series` (name and labels, as
    /// `/metrics` prints them), 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = reqwest::get(self.url("/metrics"))
            .await
            .expect("metrics answer")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }
}
