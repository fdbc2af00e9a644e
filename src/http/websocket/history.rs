//! Step 2, identify: the history behind a socket's `previous_response_id`.
//!
//! On this mode a client sends only the items that are new since a
//! response it names by `previous_response_id`. Condenser answers every
//! request over HTTP with the whole history, so that it can identify,
//! store and compact it: the socket keeps the input and output of the last
//! response it answered (as OpenAI's own sockets keep one in memory) and
//! puts them back in front of the new items. Only the last one: that is
//! all an agent continues, and it bounds the memory a socket holds to one
//! history, itself bounded by `max_body_bytes`.

use crate::upstream::socket::input_items;
use serde_json::{json, Map, Value};

/// The last response answered on one socket.
#[derive(Default)]
pub struct History {
    last: Option<Answered>,
}

/// A response whose whole history Condenser knows.
pub struct Answered {
    pub id: String,
    /// The request's input items, then the response's output items.
    pub items: Vec<Value>,
}

/// What became of a request's `previous_response_id`.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved {
    /// None was named: the request carries its whole history.
    Whole,
    /// The socket's last response: its history now leads the input.
    Continued,
    /// One this socket did not answer: the request goes as it came.
    Unknown,
}

impl History {
    /// Rebuilds `request`'s whole input when it continues the socket's
    /// last response, dropping `previous_response_id` (the upstream never
    /// saw that id).
    pub fn resolve(&self, request: &mut Map<String, Value>) -> Resolved {
        let Some(named) = request.get("previous_response_id") else {
            return Resolved::Whole;
        };
        let Some(last) = self.last.as_ref().filter(|last| named == &json!(last.id)) else {
            return if named.is_null() {
                Resolved::Whole
            } else {
                Resolved::Unknown
            };
        };
        // In place, the other fields in the client's order: the body is
        // the one the client would have sent over HTTP, byte for byte.
        let new_items = request.get("input").map(input_items).unwrap_or_default();
        let mut items = last.items.clone();
        items.extend(new_items);
        request.shift_remove("previous_response_id");
        match request.get_mut("input") {
            Some(input) => *input = Value::Array(items),
            None => {
                request.insert("input".into(), Value::Array(items));
            }
        }
        Resolved::Continued
    }

    pub fn remember(&mut self, answered: Answered) {
        self.last = Some(answered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(value: Value) -> Map<String, Value> {
        let Value::Object(fields) = value else {
            panic!("an object")
        };
        fields
    }

    fn answered() -> History {
        let mut history = History::default();
        history.remember(Answered {
            id: "resp_1".into(),
            items: vec![
                json!({"role": "user", "content": "hi"}),
                json!({"type": "function_call", "call_id": "c"}),
            ],
        });
        history
    }

    #[test]
    fn a_continuation_of_the_last_response_carries_its_whole_history() {
        let mut continued = request(json!({"model": "m", "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "c"}]}));
        assert_eq!(answered().resolve(&mut continued), Resolved::Continued);
        assert_eq!(
            Value::Object(continued),
            json!({"model": "m", "input": [{"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c"},
                {"type": "function_call_output", "call_id": "c"}]})
        );
    }

    #[test]
    fn an_id_the_socket_did_not_answer_goes_as_it_came() {
        let sent = json!({"previous_response_id": "resp_0", "input": "go on"});
        let mut unknown = request(sent.clone());
        assert_eq!(answered().resolve(&mut unknown), Resolved::Unknown);
        assert_eq!(Value::Object(unknown), sent);
        let mut fresh = request(json!({"input": "hello"}));
        assert_eq!(History::default().resolve(&mut fresh), Resolved::Whole);
    }

    #[test]
    fn a_string_input_is_one_user_message() {
        let mut continued = request(json!({"previous_response_id": "resp_1", "input": "go on"}));
        answered().resolve(&mut continued);
        assert_eq!(
            continued["input"][2],
            json!({"role": "user", "content": "go on"})
        );
    }
}
