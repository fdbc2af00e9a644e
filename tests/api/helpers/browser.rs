//! A real headless Chromium, driven over WebDriver by chromedriver (both
//! from Debian's packages; `scripts/test` installs them).

use super::wait::{wait_until_blocking, PATIENCE};
use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

pub struct Browser {
    pub client: Client,
    driver: Child,
}

fn chromedriver_binary() -> String {
    std::env::var("CONDENSER_TEST_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

impl Browser {
    /// Starts chromedriver and one headless Chromium session.
    pub async fn start() -> Browser {
        let port = free_port();
        let driver = Command::new(chromedriver_binary())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts (scripts/test installs chromium-driver; or set CONDENSER_TEST_CHROMEDRIVER)");
        wait_until_blocking(PATIENCE, "chromedriver listening", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1280,1500"]}),
        );
        // chromedriver speaks plain HTTP on loopback: no TLS stack needed.
        let mut builder = ClientBuilder::new(HttpConnector::new());
        builder.capabilities(capabilities);
        let client = builder
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        Browser { client, driver }
    }

    /// Ends the session and chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}
