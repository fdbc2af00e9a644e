//! The load-balanced topology as processes: one Postgres, several
//! `condenser serve` processes, nginx in front with `docker/nginx.conf`.

use super::db::{TestBackend, TestDb};
use super::process::ProxyProcess;
use super::wait::{wait_until_blocking, PATIENCE};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Fleet {
    pub db: TestDb,
    pub instances: Vec<ProxyProcess>,
    pub env: Vec<(String, String)>,
    nginx: Child,
    pub address: String,
    _nginx_dir: tempfile::TempDir,
}

impl Fleet {
    /// `size` instances sharing a fresh Postgres database, each with `env`.
    pub async fn start(size: usize, env: &[(&str, &str)]) -> Fleet {
        let db = TestDb::new(TestBackend::Postgres).await;
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.push(("DATABASE_URL".into(), db.url.clone()));
        let instances: Vec<ProxyProcess> = (0..size)
            .map(|_| start_instance(&env, "127.0.0.1:0"))
            .collect();
        let ports: Vec<u16> = instances.iter().map(port_of).collect();
        let (nginx, address, dir) = start_nginx(&ports);
        Fleet {
            db,
            instances,
            env,
            nginx,
            address,
            _nginx_dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// Replaces instance `index` by a new process on the same port.
    pub fn replace(&mut self, index: usize, signal: &str) {
        let port = port_of(&self.instances[index]);
        self.instances[index].signal(signal);
        self.instances[index].wait_exit(Duration::from_secs(30));
        self.instances[index] = start_instance(&self.env, &format!("127.0.0.1:{port}"));
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: the master then stops its workers too.
        let _ = Command::new("kill")
            .args(["-TERM", &self.nginx.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.nginx.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.nginx.kill();
        let _ = self.nginx.wait();
    }
}

pub fn start_instance(env: &[(String, String)], listen: &str) -> ProxyProcess {
    let mut pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    pairs.push(("CONDENSER_LISTEN", listen));
    ProxyProcess::start(&pairs)
}

pub fn port_of(instance: &ProxyProcess) -> u16 {
    instance
        .address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("instance port")
}

fn nginx_binary() -> String {
    std::env::var("CONDENSER_TEST_NGINX").unwrap_or_else(|_| "nginx".into())
}

/// `docker/nginx.conf` with its upstream servers and listen port replaced
/// for this machine.
pub fn nginx_config(ports: &[u16], listen: u16, prefix: &std::path::Path) -> String {
    let shipped =
        std::fs::read_to_string(format!("{}/docker/nginx.conf", env!("CARGO_MANIFEST_DIR")))
            .expect("docker/nginx.conf");
    let servers: String = ports
        .iter()
        .map(|port| format!("        server 127.0.0.1:{port} max_fails=0;\n"))
        .collect();
    let mut config = String::new();
    let mut in_upstream = false;
    for line in shipped.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("upstream condenser") {
            in_upstream = true;
            config.push_str(line);
            config.push('\n');
            config.push_str(&servers);
            continue;
        }
        if in_upstream && trimmed.starts_with("server ") {
            continue;
        }
        if in_upstream && trimmed.starts_with('}') {
            in_upstream = false;
        }
        if trimmed.starts_with("listen ") {
            config.push_str(&format!("        listen 127.0.0.1:{listen};\n"));
            continue;
        }
        config.push_str(line);
        config.push('\n');
    }
    config.replace(
        "/var/run/nginx.pid",
        &prefix.join("nginx.pid").display().to_string(),
    )
}

fn start_nginx(ports: &[u16]) -> (Child, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("nginx dir");
    std::fs::create_dir_all(dir.path().join("logs")).expect("logs dir");
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("addr")
        .port();
    let config_path = dir.path().join("nginx.conf");
    std::fs::write(&config_path, nginx_config(ports, listen, dir.path()))
        .expect("write nginx.conf");
    let child = Command::new(nginx_binary())
        .args([
            "-p",
            &dir.path().display().to_string(),
            "-c",
            &config_path.display().to_string(),
            "-g",
            "daemon off;",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("nginx starts (scripts/test installs it; or set CONDENSER_TEST_NGINX)");
    wait_until_blocking(PATIENCE, "nginx listening", || {
        std::net::TcpStream::connect(("127.0.0.1", listen)).is_ok()
    });
    (child, format!("http://127.0.0.1:{listen}"), dir)
}

/// The value of a counter with these labels on one instance's `/metrics`.
pub async fn metric(
    client: &reqwest::Client,
    instance: &ProxyProcess,
    name: &str,
    labels: &str,
) -> f64 {
    let text = client
        .get(instance.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .filter(|line| line.starts_with(name) && line.contains(labels))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
