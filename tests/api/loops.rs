//! Codex CLI with its built-in OpenAI provider, whose own compaction keeps
//! every recent user message verbatim (up to 64k tokens of them): where
//! what it keeps stays above its own threshold, it asks for a compaction
//! again and again inside one turn. Condenser pays a summary call for each
//! one it serves, so it must make progress or stop (issue 52): the real
//! CLI, then the same asks written out as Codex sends them.

use crate::codex::{exec, write_builtin_config, MODEL};
use crate::helpers::agent::filler;
use crate::helpers::app::{spawn_app_with, Options, TestApp};
use crate::helpers::db::{both_backends, TestBackend};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// How long a turn may take before it counts as looping.
const TURN_DEADLINE: Duration = Duration::from_secs(90);

/// One Codex session against an upstream of `window` tokens, Codex told
/// that window and `limit` as its own threshold.
struct Session {
    app: TestApp,
    home: tempfile::TempDir,
    workdir: tempfile::TempDir,
}

impl Session {
    async fn start(backend: TestBackend, window: u64, limit: u64) -> Self {
        let settings =
            json!({"compaction": {"summary_max_tokens": 300, "keepalive_interval": "300ms"}});
        let options = Options::on(backend)
            .window(MODEL, window)
            .settings(settings);
        let app = spawn_app_with(options).await;
        let home = tempfile::tempdir().expect("a CODEX_HOME");
        let workdir = tempfile::tempdir().expect("a working directory");
        write_builtin_config(home.path(), &app, window, limit);
        Self { app, home, workdir }
    }

    /// One turn pasting a log of about 300 tokens and asking for a tool:
    /// how it ended, and the summary calls it cost.
    async fn turn(&self, number: usize) -> Turn {
        let summaries_before = self.app.upstream.summary_requests().len();
        let prompt = format!(
            "Turn {number}: read this log. [tools]\n{}",
            filler(1_200, number)
        );
        let ran = run(self.home.path(), self.workdir.path(), number, &prompt);
        let events = tokio::time::timeout(TURN_DEADLINE, ran).await;
        let summary_calls = self.app.upstream.summary_requests().len() - summaries_before;
        let Ok(events) = events else {
            self.dump_last_requests();
            return Turn::TimedOut { summary_calls };
        };
        let answered = events.iter().any(|e| {
            e["item"]["type"] == "agent_message"
                && e["item"]["text"].as_str().is_some_and(|t| !t.is_empty())
        });
        let completed = events.iter().any(|e| e["type"] == "turn.completed");
        let error = events
            .iter()
            .filter(|e| e["type"] == "turn.failed" || e["type"] == "error")
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        Turn::Ended {
            answered: answered && completed,
            error,
            summary_calls,
        }
    }
}

impl Session {
    /// What the upstream saw last, for a turn that did not end.
    fn dump_last_requests(&self) {
        let requests = self.app.upstream.requests();
        for request in requests.iter().rev().take(8).rev() {
            let items = request
                .json
                .as_ref()
                .and_then(|j| j["input"].as_array().or(j["messages"].as_array()).cloned())
                .unwrap_or_default();
            let items: Vec<String> = items
                .iter()
                .map(|item| {
                    let text = item.to_string();
                    let kind = item["type"]
                        .as_str()
                        .or(item["role"].as_str())
                        .unwrap_or("?");
                    format!("{kind}:{}:{}", text.len(), &text[..text.len().min(60)])
                })
                .collect();
            eprintln!(
                "{} {} {:?} {} bytes\n  {}",
                request.path,
                request.status,
                request.kind,
                request.body.len(),
                items.join("\n  ")
            );
        }
    }
}

#[derive(Debug)]
enum Turn {
    Ended {
        answered: bool,
        error: String,
        summary_calls: usize,
    },
    TimedOut {
        summary_calls: usize,
    },
}

/// `codex exec` (resuming the session after the first turn): its `--json`
/// events, whether it succeeded or not.
async fn run(home: &Path, workdir: &Path, number: usize, prompt: &str) -> Vec<Value> {
    let output = exec(home, workdir, number, prompt)
        .output()
        .await
        .expect("codex runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Codex's fixed prompt (about 10k tokens) plus the user messages it keeps
/// stand above its threshold after a few turns: every turn still ends,
/// answered or with Condenser's error, and no turn costs more than three
/// summary calls.
async fn a_compaction_loop_is_bounded(backend: TestBackend) {
    let session = Session::start(backend, 14_000, 11_500).await;
    let mut turns = Vec::new();
    for number in 1..=6 {
        let turn = session.turn(number).await;
        eprintln!("turn {number}: {turn:?}");
        turns.push(turn);
    }
    for (number, turn) in turns.iter().enumerate() {
        match turn {
            Turn::TimedOut { summary_calls } => {
                panic!(
                    "turn {}: did not end ({summary_calls} summary calls)",
                    number + 1
                )
            }
            Turn::Ended {
                answered,
                error,
                summary_calls,
                ..
            } => {
                assert!(
                    *summary_calls <= 3,
                    "turn {}: {summary_calls} summary calls",
                    number + 1
                );
                assert!(
                    *answered || error.contains("compaction"),
                    "turn {}: neither answered nor ended by Condenser's error: {error}",
                    number + 1
                );
            }
        }
    }
}

/// Where the window leaves room, Codex's compactions are served and every
/// one of 14 turns is answered, without a loop.
async fn compactions_make_progress_where_the_window_allows(backend: TestBackend) {
    let session = Session::start(backend, 20_000, 16_000).await;
    for number in 1..=14 {
        let turn = session.turn(number).await;
        eprintln!("turn {number}: {turn:?}");
        match turn {
            Turn::Ended {
                answered: true,
                summary_calls,
                ..
            } => assert!(
                summary_calls <= 3,
                "turn {number}: {summary_calls} summary calls"
            ),
            other => panic!("turn {number}: {other:?}"),
        }
    }
    let served = session.app.upstream.summary_requests().len();
    assert!(served >= 1, "Codex's compactions were served ({served})");
}

both_backends!(
    a_compaction_loop_is_bounded,
    compactions_make_progress_where_the_window_allows
);

/// The Responses requests of a client that compacts as Codex does, against
/// an upstream without native compaction: Condenser answers each
/// `compaction_trigger` with its own sealed item.
mod asked {
    use crate::helpers::admin::{admin_get, wait_for, ADMIN_TOKEN};
    use crate::helpers::agent::filler;
    use crate::helpers::app::{spawn_app_with, Options, TestApp};
    use crate::helpers::db::{both_backends, TestBackend};
    use condenser::protocol::SUMMARY_MARKER;
    use serde_json::{json, Value};

    const MODEL: &str = "gpt-5-codex";

    fn user(text: &str) -> Value {
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    }

    /// What Codex keeps through its compactions: its user messages.
    fn kept() -> Vec<Value> {
        vec![
            user(&format!("Read this log: {}", filler(6_000, 1))),
            user(&format!("And this one: {}", filler(6_000, 2))),
        ]
    }

    fn request(instructions: &str, input: Vec<Value>) -> Value {
        json!({"model": MODEL, "instructions": instructions, "input": input, "store": false, "stream": false})
    }

    fn triggered(instructions: &str, mut input: Vec<Value>) -> Value {
        input.push(json!({"type": "compaction_trigger"}));
        request(instructions, input)
    }

    /// Asks for a compaction; the answer's status and body.
    async fn ask(app: &TestApp, body: &Value) -> (u16, Value) {
        let response = app.post_responses(body).await;
        let status = response.status().as_u16();
        (status, response.json().await.expect("json"))
    }

    /// The compaction item of an answered compaction request.
    fn item(answer: &Value) -> Value {
        let output = answer["output"].as_array().expect("output");
        assert_eq!(output.len(), 1, "{answer}");
        assert_eq!(output[0]["type"], "compaction");
        json!({"type": "compaction", "encrypted_content": output[0]["encrypted_content"]})
    }

    /// Codex's history after a compaction: what it keeps, then the item.
    fn rebuilt(item: &Value) -> Vec<Value> {
        let mut input = kept();
        input.push(item.clone());
        input
    }

    fn options(backend: TestBackend) -> Options {
        Options::on(backend).settings(json!({"compaction": {"summary_max_tokens": 200}}))
    }

    both_backends!(
        the_identical_request_is_answered_without_a_summary_call,
        asked_again_with_nothing_new_the_summary_folds_what_the_client_keeps,
        where_nothing_can_help_the_client_gets_a_clear_error_and_no_call,
    );

    async fn the_identical_request_is_answered_without_a_summary_call(backend: TestBackend) {
        let app = spawn_app_with(options(backend)).await;
        let body = triggered("You are a coding agent.", kept());
        let (status, first) = ask(&app, &body).await;
        assert_eq!(status, 200, "{first}");
        let (status, again) = ask(&app, &body).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(item(&again), item(&first), "the stored compaction");
        assert_eq!(app.upstream.summary_requests().len(), 1);
    }

    /// Codex keeps its user messages beside the item; asked again with
    /// nothing new, the second summary stands for everything before it,
    /// so the next request goes upstream without what the summary already
    /// covers, clearly smaller. A third ask with nothing new is refused.
    async fn asked_again_with_nothing_new_the_summary_folds_what_the_client_keeps(
        backend: TestBackend,
    ) {
        let app = spawn_app_with(options(backend)).await;
        let instructions = "You are a coding agent.";
        let (_, first) = ask(&app, &triggered(instructions, kept())).await;
        let (status, folded) = ask(&app, &triggered(instructions, rebuilt(&item(&first)))).await;
        assert_eq!(status, 200, "{folded}");
        assert_eq!(app.upstream.summary_requests().len(), 2);
        let mut next = rebuilt(&item(&folded));
        next.push(user("Now run the tests."));
        let response = app.post_responses(&request(instructions, next)).await;
        assert_eq!(response.status(), 200);
        let accepted = app.upstream.last_accepted().expect("accepted");
        let input = accepted.json.expect("json")["input"].clone();
        let input = input.as_array().expect("input").clone();
        assert_eq!(
            input.len(),
            2,
            "the summary, then the new message: {input:?}"
        );
        let summary = input[0]["content"][0]["text"].as_str().expect("text");
        assert!(summary.starts_with(SUMMARY_MARKER), "{summary}");
        assert_eq!(input[1], user("Now run the tests."));
        // Asked a third time with nothing new: the client's error, no call.
        let (status, refused) = ask(&app, &triggered(instructions, rebuilt(&item(&folded)))).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["code"], "compaction_loop", "{refused}");
        assert_eq!(app.upstream.summary_requests().len(), 2);
    }

    /// Instructions far larger than anything compaction may fold: asked
    /// again with nothing new, Condenser answers at once with an error
    /// that names the cause and the fix, and pays no summary call.
    async fn where_nothing_can_help_the_client_gets_a_clear_error_and_no_call(
        backend: TestBackend,
    ) {
        let admin = json!({"admin_token": ADMIN_TOKEN});
        let app = spawn_app_with(options(backend).settings(admin)).await;
        let instructions = format!("You are a coding agent. {}", filler(120_000, 9));
        let (status, first) = ask(&app, &triggered(&instructions, kept())).await;
        assert_eq!(status, 200, "{first}");
        let body = triggered(&instructions, rebuilt(&item(&first)));
        let response = app.post_responses(&body).await;
        assert_eq!(response.status(), 400);
        let header = response.headers().get("x-condenser-error").cloned();
        let refused: Value = response.json().await.expect("json");
        assert_eq!(refused["error"]["code"], "compaction_loop", "{refused}");
        assert_eq!(refused["error"]["type"], "invalid_request_error");
        let message = refused["error"]["message"].as_str().expect("message");
        assert!(
            message.contains("model_auto_compact_token_limit") && message.contains("tokens"),
            "{message}"
        );
        assert_eq!(
            header.as_ref().map(|h| h.to_str().ok()),
            Some(Some("compaction_loop"))
        );
        assert_eq!(app.upstream.summary_requests().len(), 1, "no second call");
        // The metrics are the process's, shared by the tests running in it.
        let metrics = app.metrics().await;
        let loops = metrics
            .lines()
            .find_map(|line| line.strip_prefix("condenser_compaction_loops_total "))
            .and_then(|value| value.parse::<f64>().ok());
        assert!(loops >= Some(1.0), "{metrics}");
        // And on the operator page, among the compactions not made.
        let refused = "select count(*) from requests where compaction_error = 'loop'";
        wait_for(&app, refused, 1).await;
        let (_, overview) = admin_get(&app, "/admin/overview").await;
        assert!(overview.contains("failed: loop"), "{overview}");
    }
}
