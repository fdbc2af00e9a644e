//! A scripted tool-using agent: each turn is a user message that asks for
//! tools, then several tool rounds, then the model's final answer, with the
//! whole history resent on every request as real clients do. It speaks
//! Chat Completions, Messages, Responses or Gemini's generateContent.

use super::app::TestApp;
use super::responses;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Anthropic,
    /// OpenAI Responses: `messages` holds the input items after the
    /// opening developer item.
    Responses,
    /// Gemini: `messages` holds `contents`; the model is in the path.
    Gemini,
}

pub struct Agent {
    pub dialect: Dialect,
    pub messages: Vec<Value>,
    pub system: String,
    pub model: String,
    /// Filler per tool result, to make the history grow.
    pub result_bytes: usize,
    pub rounds_per_turn: usize,
    /// Extra top-level request fields (e.g. `thinking`); a null removes one
    /// the agent would send (`max_tokens` for a reasoning model).
    pub extra: Value,
}

/// What the agent saw for one request.
pub struct Step {
    pub status: u16,
    pub compactions: u32,
    /// `x-condenser-compacted-messages`: messages a stored summary stood for.
    pub compacted_messages: Option<u64>,
    pub body: Value,
}

impl Agent {
    pub fn new(dialect: Dialect, model: &str, result_bytes: usize, rounds_per_turn: usize) -> Self {
        Self {
            dialect,
            messages: Vec::new(),
            system: "You are a coding agent. Use tools to inspect the repository.".into(),
            model: model.into(),
            result_bytes,
            rounds_per_turn,
            extra: json!({}),
        }
    }

    pub fn request(&self) -> Value {
        let mut request = match self.dialect {
            Dialect::OpenAi => {
                let mut messages = vec![json!({"role": "system", "content": self.system})];
                messages.extend(self.messages.iter().cloned());
                json!({"model": self.model, "messages": messages, "max_tokens": 256, "tools": [{"type": "function", "function": {
                    "name": "read_file", "description": "Read a file",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]})
            }
            Dialect::Anthropic => {
                json!({"model": self.model, "system": self.system, "messages": self.messages, "max_tokens": 256,
                "tools": [{"name": "read_file", "description": "Read a file",
                    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]})
            }
            Dialect::Responses => responses::request(&self.model, &self.system, &self.messages),
            Dialect::Gemini => json!({
                "systemInstruction": {"parts": [{"text": self.system}]},
                "contents": self.messages,
                "tools": [{"functionDeclarations": [{"name": "read_file", "description": "Read a file",
                    "parametersJsonSchema": {"type": "object", "properties": {"path": {"type": "string"}}}}]}],
                "generationConfig": {"maxOutputTokens": 1024},
            }),
        };
        for (key, value) in self.extra.as_object().into_iter().flatten() {
            match value {
                Value::Null => {
                    request.as_object_mut().map(|body| body.remove(key));
                }
                value => request[key] = value.clone(),
            }
        }
        request
    }

    /// Sends the history; appends the assistant's reply.
    pub async fn send(&mut self, app: &TestApp) -> Step {
        let request = self.request();
        let response = match self.dialect {
            Dialect::OpenAi => app.post_chat(&request).await,
            Dialect::Anthropic => app.post_messages(&request).await,
            Dialect::Responses => app.post_responses(&request).await,
            Dialect::Gemini => app.post_gemini(&self.model, &request).await,
        };
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok()?.parse().ok())
        };
        let compactions = header("x-condenser-compactions").unwrap_or(0) as u32;
        let compacted_messages = header("x-condenser-compacted-messages");
        let body = match self.dialect {
            Dialect::Responses => responses::read(response, request["stream"] == true).await,
            _ => response.json().await.expect("json body"),
        };
        if status == 200 {
            match self.dialect {
                Dialect::OpenAi => self.messages.push(body["choices"][0]["message"].clone()),
                Dialect::Anthropic => self
                    .messages
                    .push(json!({"role": "assistant", "content": body["content"]})),
                Dialect::Responses => self
                    .messages
                    .extend(body["output"].as_array().into_iter().flatten().cloned()),
                Dialect::Gemini => self.messages.push(body["candidates"][0]["content"].clone()),
            }
        }
        Step {
            status,
            compactions,
            compacted_messages,
            body,
        }
    }

    pub fn say(&mut self, text: &str) {
        self.messages.push(match self.dialect {
            Dialect::Responses => responses::user_item(text),
            Dialect::Gemini => json!({"role": "user", "parts": [{"text": text}]}),
            _ => json!({"role": "user", "content": text}),
        });
    }

    /// Tool call ids of the last assistant message (on Responses, of the
    /// function calls no output answers yet).
    fn pending_calls(&self) -> Vec<String> {
        let Some(last) = self.messages.last() else {
            return Vec::new();
        };
        let ids = match self.dialect {
            Dialect::OpenAi => last["tool_calls"].as_array().cloned().unwrap_or_default(),
            Dialect::Anthropic => last["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_use")
                .cloned()
                .collect(),
            Dialect::Responses => return responses::pending_calls(&self.messages),
            // Gemini links a response to its call by the function's name.
            Dialect::Gemini => {
                let parts = last["parts"].as_array().into_iter().flatten();
                let calls = parts.filter_map(|p| p["functionCall"]["name"].as_str());
                return calls.map(String::from).collect();
            }
        };
        ids.iter()
            .filter_map(|call| call["id"].as_str().map(String::from))
            .collect()
    }

    pub fn answer_tools(&mut self, content: &str) {
        let calls = self.pending_calls();
        match self.dialect {
            Dialect::OpenAi => {
                for id in calls {
                    self.messages
                        .push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                }
            }
            Dialect::Anthropic => {
                let results: Vec<Value> = calls
                    .iter()
                    .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": content}))
                    .collect();
                self.messages
                    .push(json!({"role": "user", "content": results}));
            }
            Dialect::Gemini => {
                let parts: Vec<Value> = calls
                    .iter()
                    .map(|name| json!({"functionResponse": {"name": name, "response": {"output": content}}}))
                    .collect();
                self.messages.push(json!({"role": "user", "parts": parts}));
            }
            Dialect::Responses => {
                for id in calls {
                    self.messages.push(
                        json!({"type": "function_call_output", "call_id": id, "output": content}),
                    );
                }
            }
        }
    }

    /// One user turn with its tool rounds; returns every step's outcome.
    pub async fn turn(&mut self, app: &TestApp, number: usize) -> Vec<Step> {
        self.turn_until(app, number, |_| false).await
    }

    /// Like [`Agent::turn`], ending early after the first step at which
    /// `stop` holds.
    pub async fn turn_until(
        &mut self,
        app: &TestApp,
        number: usize,
        stop: impl Fn(&TestApp) -> bool,
    ) -> Vec<Step> {
        self.say(&format!("Turn {number}: inspect module {number}. [tools]"));
        let mut steps = Vec::new();
        for round in 0..=self.rounds_per_turn {
            let step = self.send(app).await;
            let status = step.status;
            steps.push(step);
            if status != 200 || self.pending_calls().is_empty() || stop(app) {
                break;
            }
            let more = if round + 1 < self.rounds_per_turn {
                "[more]"
            } else {
                "done"
            };
            let filler = filler(self.result_bytes, number * 100 + round);
            self.answer_tools(&format!(
                "contents of module {number} round {round} {more} {filler}"
            ));
        }
        steps
    }

    /// Runs turns, each step asserted successful, until the upstream has
    /// seen `summaries` summary calls; fails after `max_turns`.
    pub async fn run_until_summaries(&mut self, app: &TestApp, summaries: usize, max_turns: usize) {
        let mut turn = 0;
        while app.upstream.summary_requests().len() < summaries {
            turn += 1;
            assert!(
                turn <= max_turns,
                "fewer than {summaries} summaries after {max_turns} turns"
            );
            for step in self.turn(app, turn).await {
                assert_eq!(step.status, 200, "turn {turn}: {}", step.body);
            }
        }
    }

    /// Turns `1..=turns`, asserting every step succeeded; returns how many
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

/// Deterministic text unique to `seed`, so summaries can be traced to it.
pub fn filler(bytes: usize, seed: usize) -> String {
    let word = format!("fact-{seed:05} ");
    word.repeat(bytes / word.len() + 1)[..bytes].to_string()
}

/// The text of a message's content, whatever its shape.
pub fn text(message: &Value) -> String {
    if let Some(parts) = message["parts"].as_array() {
        return parts.iter().filter_map(|p| p["text"].as_str()).collect();
    }
    match &message["content"] {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
