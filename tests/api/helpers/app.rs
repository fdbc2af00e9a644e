//! The real proxy on a random port, in front of the strict fake upstream.

use super::db::{TestBackend, TestDb};
use super::wait::{wait_until, PATIENCE};
use condenser::app::Application;
use condenser::config::Settings;
use condenser::conversation::{ChainHash, ConversationId};
use condenser::protocol::SUMMARY_MARKER;
use condenser::store::StoreMemory;
use fake_upstream::{FakeConfig, FakeUpstream};
use serde_json::{json, Value};

pub const OPENAI_KEY: &str = "sk-test-openai-0123456789";
pub const ANTHROPIC_KEY: &str = "sk-ant-test-0123456789";
pub const GEMINI_KEY: &str = "gk-test-gemini-0123456789";

pub struct TestApp {
    pub address: String,
    pub upstream: FakeUpstream,
    pub client: reqwest::Client,
    pub db: TestDb,
    /// What the running proxy remembers of the store.
    pub memory: StoreMemory,
    settings: Value,
}

/// What a test may change before the proxy starts.
pub struct Options {
    pub backend: TestBackend,
    pub fake: FakeConfig,
    /// Settings as JSON, merged over the defaults the harness sets.
    pub settings: Value,
}

impl Default for Options {
    fn default() -> Self {
        let fake = FakeConfig {
            summary_marker: Some(SUMMARY_MARKER.to_string()),
            ..FakeConfig::default()
        };
        Self {
            backend: TestBackend::Sqlite,
            fake,
            settings: json!({}),
        }
    }
}

impl Options {
    pub fn on(backend: TestBackend) -> Self {
        Self {
            backend,
            ..Self::default()
        }
    }

    pub fn settings(mut self, patch: Value) -> Self {
        merge(&mut self.settings, patch);
        self
    }

    pub fn window(mut self, model: &str, tokens: u64) -> Self {
        self.fake.context_windows.insert(model.to_string(), tokens);
        self
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Options::default()).await
}

pub async fn spawn_app_with(options: Options) -> TestApp {
    init_test_logging();
    let upstream = FakeUpstream::start(options.fake).await;
    let db = TestDb::new(options.backend).await;
    let mut settings = json!({
        "listen": "127.0.0.1:0",
        "openai_base_url": upstream.openai_base_url(),
        "anthropic_base_url": upstream.base_url(),
        "gemini_base_url": upstream.base_url(),
        "database_url": db.url,
        // Claude's clouds: the fake serves both at its own paths.
        "upstreams": {
            "bedrock": {"base_url": upstream.base_url()},
            "vertex": {"base_url": format!("{}/v1", upstream.base_url())},
        },
    });
    merge(&mut settings, options.settings);
    let (address, memory) = start_proxy_remembering(&settings).await;
    TestApp {
        address,
        upstream,
        client: reqwest::Client::new(),
        db,
        memory,
        settings,
    }
}

pub async fn start_proxy(settings: &Value) -> String {
    start_proxy_remembering(settings).await.0
}

/// [`start_proxy`], and a handle on what the proxy remembers of the store.
pub async fn start_proxy_remembering(settings: &Value) -> (String, StoreMemory) {
    let settings: Settings =
        serde_json::from_value(settings.clone()).expect("test settings deserialize");
    settings.validate().expect("test settings are valid");
    let app = Application::build(settings)
        .await
        .expect("application builds");
    let address = format!("http://{}", app.local_addr());
    let memory = app.memory();
    tokio::spawn(app.run_until(std::future::pending()));
    (address, memory)
}

impl TestApp {
    /// A new proxy on the same database and upstream, as after a restart:
    /// nothing survives but what was stored.
    pub async fn restart(&mut self) {
        (self.address, self.memory) = start_proxy_remembering(&self.settings).await;
    }

    /// A new proxy with `patch` merged into the settings, on the same
    /// database and upstream.
    pub async fn reconfigure(&mut self, patch: Value) {
        merge(&mut self.settings, patch);
        (self.address, self.memory) = start_proxy_remembering(&self.settings).await;
    }

    /// The head of `conversation` (its id in hex), once the proxy
    /// remembers it wrote it.
    pub async fn stored_head(&self, conversation: &str) -> (ConversationId, ChainHash) {
        let pool = self.db.pool().await;
        let head: String =
            sqlx::query_scalar("select head from conversations where conversation = $1")
                .bind(conversation)
                .fetch_one(&pool)
                .await
                .expect("the conversation's row");
        let conversation = ConversationId::from_hex(conversation).expect("a conversation id");
        let head = ChainHash::from_hex(&head).expect("a chain hash");
        wait_until(PATIENCE, "the proxy to remember its write", || async {
            self.memory.is_stored(&conversation, &head)
        })
        .await;
        (conversation, head)
    }

    /// Waits until the proxy no longer counts `head` of `conversation` as
    /// stored: it noticed a deletion made beside it (Postgres tells it at
    /// commit; a SQLite server looks at the deletion count every second).
    pub async fn wait_until_forgotten(&self, (conversation, head): (ConversationId, ChainHash)) {
        let what = "the proxy to notice the deletion";
        wait_until(PATIENCE, what, || async {
            !self.memory.is_stored(&conversation, &head)
        })
        .await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// The Prometheus text at `/metrics`.
    pub async fn metrics(&self) -> String {
        let response = self.client.get(self.url("/metrics")).send().await;
        let response = response.expect("metrics answered");
        response.text().await.expect("metrics text")
    }

    /// `POST /v1beta/models/{model}:generateContent` as Google's SDKs send
    /// it, the key in `x-goog-api-key`.
    pub async fn post_gemini(&self, model: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(&format!("/v1beta/models/{model}:generateContent")))
            .header("x-goog-api-key", GEMINI_KEY)
            .json(body)
            .send()
            .await
            .expect("proxy reachable")
    }

    /// `POST /v1/chat/completions` as the OpenAI SDK sends it.
    pub async fn post_chat(&self, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .json(body)
            .send()
            .await
            .expect("proxy answers")
    }

    /// `POST /v1/responses` as the OpenAI SDK and Codex send it.
    pub async fn post_responses(&self, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/responses"))
            .bearer_auth(OPENAI_KEY)
            .json(body)
            .send()
            .await
            .expect("proxy answers")
    }

    /// `POST /v1/messages` as the Anthropic SDK sends it.
    pub async fn post_messages(&self, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/messages"))
            .header("x-api-key", ANTHROPIC_KEY)
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .expect("proxy answers")
    }
}

/// Deep-merges `patch` into `base` (objects merge, everything else replaces).
pub fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (base, patch) => *base = patch,
    }
}

/// Logs stay silent unless `TEST_LOG` is set.
fn init_test_logging() {
    if std::env::var_os("TEST_LOG").is_some() {
        let subscriber = condenser::telemetry::get_subscriber(
            Default::default(),
            "debug",
            std::io::stderr,
            condenser::telemetry::stderr_takes_colors(),
        );
        condenser::telemetry::init(subscriber);
    }
}
