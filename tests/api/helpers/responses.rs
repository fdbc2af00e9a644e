//! A scripted tool-using agent on the Responses API, as Codex CLI drives
//! it: `store: false`, the whole history resent as input items every time,
//! reasoning items with their encrypted content passed back as received.

use super::app::{TestApp, OPENAI_KEY};
use serde_json::{json, Value};

pub struct ResponsesAgent {
    pub model: String,
    pub instructions: String,
    pub input: Vec<Value>,
    /// Filler per tool output, to make the history grow.
    pub result_bytes: usize,
    pub rounds_per_turn: usize,
    pub stream: bool,
}

/// What the agent saw for one request.
pub struct Step {
    pub status: u16,
    pub compactions: u32,
    pub body: Value,
}

impl ResponsesAgent {
    pub fn new(model: &str, result_bytes: usize, rounds_per_turn: usize) -> Self {
        Self {
            model: model.into(),
            instructions: "You are a coding agent. Use tools to inspect the repository.".into(),
            input: vec![json!({"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "Sandbox: workspace-write."}]})],
            result_bytes,
            rounds_per_turn,
            stream: false,
        }
    }

    pub fn request(&self) -> Value {
        json!({
            "model": self.model,
            "instructions": self.instructions,
            "input": self.input,
            "tools": [{"type": "function", "name": "read_file", "description": "Read a file", "strict": false,
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}],
            "tool_choice": "auto",
            "parallel_tool_calls": true,
            "reasoning": {"effort": "low"},
            "store": false,
            "stream": self.stream,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "session-1",
        })
    }

    /// Sends the history; appends the response's output items.
    pub async fn send(&mut self, app: &TestApp) -> Step {
        let response = app
            .client
            .post(app.url("/v1/responses"))
            .bearer_auth(OPENAI_KEY)
            .json(&self.request())
            .send()
            .await
            .expect("proxy answers");
        let status = response.status().as_u16();
        let compactions = response
            .headers()
            .get("x-condenser-compactions")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        let body = if self.stream {
            completed(&response.text().await.expect("body"))
        } else {
            response.json().await.expect("json body")
        };
        if status == 200 {
            self.input
                .extend(body["output"].as_array().into_iter().flatten().cloned());
        }
        Step {
            status,
            compactions,
            body,
        }
    }

    pub fn say(&mut self, text: &str) {
        self.input
            .push(json!({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": text}]}));
    }

    /// Answers every pending call with `output`.
    pub fn answer_calls(&mut self, output: &str) {
        for call_id in self.pending_calls() {
            self.input.push(
                json!({"type": "function_call_output", "call_id": call_id, "output": output}),
            );
        }
    }

    fn pending_calls(&self) -> Vec<String> {
        let answered: Vec<&str> = self
            .input
            .iter()
            .filter(|i| i["type"] == "function_call_output")
            .filter_map(|i| i["call_id"].as_str())
            .collect();
        self.input
            .iter()
            .filter(|i| i["type"] == "function_call")
            .filter_map(|i| i["call_id"].as_str())
            .filter(|id| !answered.contains(id))
            .map(String::from)
            .collect()
    }

    /// One user turn with its tool rounds; returns every step's outcome.
    pub async fn turn(&mut self, app: &TestApp, number: usize) -> Vec<Step> {
        self.say(&format!("Turn {number}: inspect module {number}. [tools]"));
        let mut steps = Vec::new();
        for round in 0..=self.rounds_per_turn {
            let step = self.send(app).await;
            let status = step.status;
            steps.push(step);
            if status != 200 || self.pending_calls().is_empty() {
                break;
            }
            let more = if round + 1 < self.rounds_per_turn {
                "[more]"
            } else {
                "done"
            };
            let filler = super::agent::filler(self.result_bytes, number * 100 + round);
            self.answer_calls(&format!(
                "contents of module {number} round {round} {more} {filler}"
            ));
        }
        steps
    }

    /// Turns `1..=turns`, each step asserted successful; returns how many
    /// compactions the proxy reported.
    pub async fn run_turns(&mut self, app: &TestApp, turns: usize) -> u32 {
        let mut compactions = 0;
        for turn in 1..=turns {
            for step in self.turn(app, turn).await {
                assert_eq!(step.status, 200, "turn {turn}: {}", step.body);
                compactions += step.compactions;
            }
        }
        compactions
    }
}

/// The response in a stream's `response.completed` event (or the failure
/// event, for the assertion message).
pub fn completed(stream: &str) -> Value {
    let mut last = Value::Null;
    for data in stream.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if event["type"] == "response.completed" {
            return event["response"].clone();
        }
        last = event;
    }
    last
}
