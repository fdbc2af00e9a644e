//! Local model servers that cut a prompt instead of refusing it
//! (ARCHITECTURE.md "Local servers"): Ollama's native API through its own
//! Python client, compacted before sending so nothing is ever cut; and an
//! OpenAI-compatible server that truncates silently, caught once and never
//! again.

use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp, OPENAI_KEY};
use crate::helpers::db::{both_backends, TestBackend};
use fake_upstream::{RequestKind, Scripted};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const MODEL: &str = "smollm2:135m";
const NUM_CTX: u64 = 2_048;

fn python() -> String {
    std::env::var("CONDENSER_TEST_PYTHON")
        .expect("CONDENSER_TEST_PYTHON is not set: run the suite with scripts/test")
}

/// The proxy with Ollama's paths going to the fake, whose default window
/// is `default_window`.
async fn ollama_app(backend: TestBackend, default_window: u64) -> TestApp {
    let mut options = Options::on(backend).settings(json!({
        "compaction": {"summary_max_tokens": 300},
        "ollama": {"default_context_window": default_window},
    }));
    options.fake.ollama_context_window = default_window;
    let mut app = spawn_app_with(options).await;
    let base_url = app.upstream.base_url();
    app.reconfigure(json!({"ollama": {"base_url": base_url}}))
        .await;
    app
}

async fn run_client(app: &TestApp, stream: bool, num_ctx: Option<u64>) {
    let path = format!("{}/tests/sdk/ollama_chat.py", env!("CARGO_MANIFEST_DIR"));
    let mut command = tokio::process::Command::new(python());
    command
        .arg(&path)
        .env("CONDENSER_URL", &app.address)
        .env("MODEL", MODEL)
        .env("TURNS", "20")
        .env("STREAM", if stream { "1" } else { "0" });
    if let Some(num_ctx) = num_ctx {
        command.env("NUM_CTX", num_ctx.to_string());
    }
    let output = command.output().await.expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "ollama_chat.py failed:\n{stderr}");
}

/// Nothing the fake was sent went past the window, nothing was cut,
/// compactions happened, and every fact their summaries carried reached
/// the request each stands for.
async fn assert_never_cut(app: &TestApp, window: u64) {
    let requests = app.upstream.requests();
    let chats: Vec<_> = requests.iter().filter(|r| r.path == "/api/chat").collect();
    assert!(!chats.is_empty());
    for request in &chats {
        assert!(
            !request.truncated,
            "the server cut a prompt: {:?}",
            request.input_tokens
        );
        let sent = request.input_tokens.expect("counted");
        assert!(
            sent <= window,
            "{sent} tokens sent to a {window}-token window"
        );
    }
    let summaries = chats
        .iter()
        .filter(|r| r.kind == RequestKind::Summary)
        .count();
    assert!(summaries >= 2, "{summaries} summaries over 20 turns");
    assert!(app.db.count("select count(*) from compactions").await >= 2);
    app.upstream.assert_facts_survive();
}

both_backends!(
    a_num_ctx_above_the_models_trained_length_is_held_to_it,
    ollamas_client_runs_twenty_turns_with_num_ctx_and_nothing_is_cut,
    ollamas_client_runs_twenty_turns_on_the_default_window_and_nothing_is_cut,
    a_silent_truncation_is_caught_once_and_never_happens_again,
);

async fn ollamas_client_runs_twenty_turns_with_num_ctx_and_nothing_is_cut(backend: TestBackend) {
    for stream in [false, true] {
        // The server's default is larger: the request's num_ctx rules.
        let app = ollama_app(backend, 8_192).await;
        run_client(&app, stream, Some(NUM_CTX)).await;
        assert_never_cut(&app, NUM_CTX).await;
    }
}

/// Ollama gives a model no more than its trained length, whatever
/// `num_ctx` asks: Condenser reads it from `/api/show` and holds to it.
async fn a_num_ctx_above_the_models_trained_length_is_held_to_it(backend: TestBackend) {
    let mut options = Options::on(backend)
        .window(MODEL, NUM_CTX)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}));
    options.fake.ollama_context_window = 32_768;
    let mut app = spawn_app_with(options).await;
    let base_url = app.upstream.base_url();
    app.reconfigure(json!({"ollama": {"base_url": base_url}}))
        .await;
    run_client(&app, false, Some(32_768)).await;
    assert_never_cut(&app, NUM_CTX).await;
}

async fn ollamas_client_runs_twenty_turns_on_the_default_window_and_nothing_is_cut(
    backend: TestBackend,
) {
    let app = ollama_app(backend, NUM_CTX).await;
    run_client(&app, false, None).await;
    assert_never_cut(&app, NUM_CTX).await;
}

/// An OpenAI-compatible server (Ollama's `/v1`, llama.cpp with context
/// shift in older builds) that cuts a prompt past its window and answers
/// 200. No window is known: the first cut is caught, counted and marked;
/// from the next request on, the conversation is compacted before sending.
async fn a_silent_truncation_is_caught_once_and_never_happens_again(backend: TestBackend) {
    let mut options = Options::on(backend)
        .window("local-model", NUM_CTX)
        .settings(json!({"compaction": {"summary_max_tokens": 300}}));
    options.fake.silent_truncation = true;
    let app = spawn_app_with(options).await;
    let counted_before = silent_truncations(&app).await;
    let mut messages = vec![json!({"role": "system", "content": "Be brief."})];
    let mut marked = Vec::new();
    for turn in 0..12 {
        // A user pasting a log now and then: the first paste overshoots.
        let bytes = if turn == 3 { 6_000 } else { 1_600 };
        messages.push(json!({"role": "user", "content": filler(bytes, turn)}));
        let body = json!({"model": "local-model", "messages": messages, "max_tokens": 50});
        let response = app.post_chat(&body).await;
        assert_eq!(response.status(), 200, "turn {turn}");
        marked.push(
            response
                .headers()
                .contains_key("x-condenser-truncated-upstream"),
        );
        let reply: Value = response.json().await.expect("json");
        messages.push(reply["choices"][0]["message"].clone());
    }
    let cut: Vec<bool> = app
        .upstream
        .chat_requests()
        .iter()
        .map(|r| r.truncated)
        .collect();
    assert_eq!(cut.iter().filter(|&&c| c).count(), 1, "cut once: {cut:?}");
    assert_eq!(
        marked.iter().filter(|&&m| m).count(),
        1,
        "marked once: {marked:?}"
    );
    assert_eq!(marked.iter().position(|&m| m), cut.iter().position(|&c| c));
    // The counter is the process's: other tests may add to it meanwhile.
    assert!(silent_truncations(&app).await > counted_before, "counted");
}

async fn silent_truncations(app: &TestApp) -> u64 {
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    let text = metrics.text().await.expect("text");
    text.lines()
        .find_map(|line| line.strip_prefix("condenser_silent_truncations_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// Estimates miss by 5 to 25 %, and some servers report cached tokens
/// apart from the rest: neither is a cut.
#[tokio::test]
async fn calibration_noise_and_prompt_caching_raise_no_alarm() {
    let app = spawn_app_with(Options::default()).await;
    let body = json!({"model": "local-model", "messages": [
        {"role": "user", "content": filler(16_000, 1)}]});
    let estimate = body.to_string().len() as u64 / 4;
    for (prompt, cached) in [
        (estimate * 3 / 4, 0),
        (estimate * 3 / 10, estimate * 7 / 10),
    ] {
        let usage = json!({"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5,
            "prompt_tokens_details": {"cached_tokens": cached}});
        let answer = json!({"id": "c", "object": "chat.completion", "model": "local-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": usage});
        app.upstream.push_script(Scripted::Respond {
            kind: RequestKind::Chat,
            status: 200,
            headers: vec![],
            body: answer.to_string(),
        });
        let response = app
            .client
            .post(app.url("/v1/chat/completions"))
            .bearer_auth(OPENAI_KEY)
            .json(&body)
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200);
        assert!(!response
            .headers()
            .contains_key("x-condenser-truncated-upstream"));
    }
}
