//! What Gemini refuses in a `generateContent` request, with its messages,
//! plus Condenser's own invariants (no credential in a body, one summary
//! content right at the start):
//!
//! - Unknown fields, at any depth the fake knows: `Invalid JSON payload
//!   received. Unknown name "x" at '…': Cannot find field.` (protobuf's
//!   JSON parser). Both camelCase and the proto's snake_case names are
//!   accepted, as protobuf's JSON mapping requires.
//! - Roles are `user` and `model` ("Please use a valid role: user,
//!   model."); a content's parts must not be empty.
//! - A function call turn comes right after a user turn or a function
//!   response turn; a function response turn right after a function call
//!   turn, with as many responses as there were calls
//!   (google-gemini/gemini-cli#11814, #16415; langchain-ai/langchain#27799).
//! - Gemini 3 requires the first function call of each step of the
//!   current turn to carry back its `thoughtSignature`
//!   (ai.google.dev/gemini-api/docs/thought-signatures; message from
//!   manthanabc/paws#103); `skip_thought_signature_validator` is the
//!   documented stand-in. A signature that is not base64 or was altered is
//!   refused.

use axum::response::Response;
use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};

const SIGNING_SECRET: &str = "fake-upstream-gemini-thoughts";
const DUMMY_SIGNATURES: [&str; 2] = [
    "skip_thought_signature_validator",
    "context_engineering_is_the_way_to_go",
];

const REQUEST_FIELDS: &[&str] = &[
    "contents",
    "systemInstruction",
    "system_instruction",
    "tools",
    "toolConfig",
    "tool_config",
    "safetySettings",
    "safety_settings",
    "generationConfig",
    "generation_config",
    "cachedContent",
    "cached_content",
];
const CONTENT_FIELDS: &[&str] = &["role", "parts"];
const PART_FIELDS: &[&str] = &[
    "text",
    "inlineData",
    "inline_data",
    "fileData",
    "file_data",
    "functionCall",
    "function_call",
    "functionResponse",
    "function_response",
    "thought",
    "thoughtSignature",
    "thought_signature",
    "executableCode",
    "executable_code",
    "codeExecutionResult",
    "code_execution_result",
    "videoMetadata",
    "video_metadata",
    "partMetadata",
    "part_metadata",
    "mediaResolution",
    "media_resolution",
    "toolCall",
    "tool_call",
    "toolResponse",
    "tool_response",
];

/// A key in camelCase or in the proto's snake_case.
pub fn field<'v>(value: &'v Value, camel: &str, snake: &str) -> Option<&'v Value> {
    value.get(camel).or_else(|| value.get(snake))
}

/// The caller's key from `x-goog-api-key` or `?key=`, or Google's refusal.
#[allow(clippy::result_large_err)]
pub fn credential(parts: &http::request::Parts) -> Result<String, Response> {
    let header = parts
        .headers
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok());
    let query = parts
        .uri
        .query()
        .unwrap_or_default()
        .split('&')
        .find_map(|p| p.strip_prefix("key="));
    match header.or(query) {
        None => Err(crate::gemini::error(http::StatusCode::FORBIDDEN, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")),
        Some("sk-invalid") => Err(crate::gemini::error(http::StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")),
        Some(key) => Ok(key.to_string()),
    }
}

pub fn check(
    request: &Value,
    model: &str,
    key: &str,
    body: &[u8],
    summary_marker: Option<&str>,
) -> Result<(), String> {
    if String::from_utf8_lossy(body).contains(key) {
        return Err(
            "fake-upstream invariant: the caller's credential appears in the request body".into(),
        );
    }
    known_fields(request, REQUEST_FIELDS, "")?;
    let contents = request["contents"].as_array().filter(|c| !c.is_empty());
    let contents =
        contents.ok_or("* GenerateContentRequest.contents: contents is not specified")?;
    for (index, content) in contents.iter().enumerate() {
        shape(content, index)?;
    }
    function_pairs(contents)?;
    signatures(contents, model.starts_with("gemini-3"))?;
    match summary_marker {
        Some(marker) => summary_placement(request, contents, marker),
        None => Ok(()),
    }
}

fn known_fields(value: &Value, known: &[&str], at: &str) -> Result<(), String> {
    let unknown = value
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys())
        .find(|k| !known.contains(&k.as_str()));
    match (unknown, at) {
        (None, _) => Ok(()),
        (Some(name), "") => Err(format!(
            "Invalid JSON payload received. Unknown name \"{name}\": Cannot find field."
        )),
        (Some(name), at) => Err(format!(
            "Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field."
        )),
    }
}

fn parts(content: &Value) -> &[Value] {
    content["parts"].as_array().map_or(&[], Vec::as_slice)
}

fn shape(content: &Value, index: usize) -> Result<(), String> {
    known_fields(content, CONTENT_FIELDS, &format!("contents[{index}]"))?;
    if !matches!(
        content.get("role").and_then(Value::as_str),
        None | Some("user" | "model")
    ) {
        return Err("Please use a valid role: user, model.".into());
    }
    if parts(content).is_empty() {
        return Err(format!(
            "* GenerateContentRequest.contents[{index}].parts: contents.parts must not be empty."
        ));
    }
    for (part_index, part) in parts(content).iter().enumerate() {
        known_fields(
            part,
            PART_FIELDS,
            &format!("contents[{index}].parts[{part_index}]"),
        )?;
        let signature =
            field(part, "thoughtSignature", "thought_signature").and_then(Value::as_str);
        if signature.is_some_and(|s| decode(s).is_none()) {
            return Err(format!("Invalid value at 'contents[{index}].parts[{part_index}].thought_signature' (TYPE_BYTES), Base64 decoding failed for \"{}\"", signature.unwrap_or_default()));
        }
    }
    Ok(())
}

fn calls(content: &Value) -> usize {
    parts(content)
        .iter()
        .filter(|p| field(p, "functionCall", "function_call").is_some())
        .count()
}

fn responses(content: &Value) -> usize {
    parts(content)
        .iter()
        .filter(|p| field(p, "functionResponse", "function_response").is_some())
        .count()
}

fn is_user(content: &Value) -> bool {
    content
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("user")
        == "user"
}

fn function_pairs(contents: &[Value]) -> Result<(), String> {
    for (index, content) in contents.iter().enumerate() {
        let previous = index.checked_sub(1).map(|p| &contents[p]);
        if calls(content) > 0 && !previous.is_some_and(is_user) {
            return Err("Please ensure that function call turn comes immediately after a user turn or after a function response turn.".into());
        }
        if responses(content) == 0 {
            continue;
        }
        let answered = previous.map_or(0, calls);
        if answered == 0 {
            return Err("Please ensure that function response turn comes immediately after a function call turn.".into());
        }
        if answered != responses(content) {
            return Err("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.".into());
        }
    }
    Ok(())
}

/// Every signature must be one the fake made (or a documented stand-in);
/// on Gemini 3 the current turn's steps must carry theirs.
fn signatures(contents: &[Value], required: bool) -> Result<(), String> {
    let turn_start = contents
        .iter()
        .rposition(|c| is_user(c) && responses(c) == 0)
        .unwrap_or(0);
    for (index, content) in contents.iter().enumerate() {
        for part in parts(content) {
            let signature =
                field(part, "thoughtSignature", "thought_signature").and_then(Value::as_str);
            if signature.is_some_and(|s| !genuine(s)) {
                return Err("Corrupted thought signature.".into());
            }
        }
        let first_call = parts(content)
            .iter()
            .find(|p| field(p, "functionCall", "function_call").is_some());
        let Some(call) = first_call.filter(|_| required && index > turn_start) else {
            continue;
        };
        if field(call, "thoughtSignature", "thought_signature").is_none() {
            let name = field(call, "functionCall", "function_call")
                .and_then(|c| c["name"].as_str())
                .unwrap_or_default();
            return Err(format!("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{name}` , position {}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.", index + 1));
        }
    }
    Ok(())
}

fn decode(signature: &str) -> Option<Vec<u8>> {
    let standard = base64::engine::general_purpose::STANDARD.decode(signature);
    standard
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(signature))
        .ok()
}

fn mac(id: &str) -> String {
    hex::encode(&Sha256::digest(format!("{SIGNING_SECRET}{id}"))[..12])
}

/// The signature of the thinking behind answer `id`.
pub fn signature_for(id: &str) -> String {
    crate::gemini::encode(format!("{id}.{}", mac(id)).as_bytes())
}

fn genuine(signature: &str) -> bool {
    if DUMMY_SIGNATURES.contains(&signature) {
        return true;
    }
    let decoded = decode(signature).map(|b| String::from_utf8_lossy(&b).into_owned());
    decoded
        .and_then(|d| d.split_once('.').map(|(id, mac_)| mac(id) == mac_))
        .unwrap_or(false)
}

/// Parts holding an image or a file.
pub fn media_parts(request: &Value) -> u64 {
    let contents = request["contents"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let media = |p: &&Value| {
        ["inlineData", "inline_data", "fileData", "file_data"]
            .iter()
            .any(|k| p.get(*k).is_some())
    };
    contents
        .iter()
        .map(|c| parts(c).iter().filter(media).count() as u64)
        .sum()
}

fn first_text(content: &Value) -> &str {
    parts(content)
        .first()
        .and_then(|p| p["text"].as_str())
        .unwrap_or_default()
}

/// One summary at most: the first content, the user's, starting with the
/// marker, and never in the system instruction.
fn summary_placement(request: &Value, contents: &[Value], marker: &str) -> Result<(), String> {
    let fail = |why: &str| Err(format!("fake-upstream invariant: {why}"));
    let system = field(request, "systemInstruction", "system_instruction");
    if system.is_some_and(|s| s.to_string().contains(marker)) {
        return fail("the summary marker appears inside the system prompt");
    }
    let marked: Vec<usize> = (0..contents.len())
        .filter(|&i| contents[i].to_string().contains(marker))
        .collect();
    match marked.as_slice() {
        [] => Ok(()),
        [index] if *index != 0 => fail("the summary message is not right after the system prompt"),
        [index] if !is_user(&contents[*index]) => fail("the summary message is not a user message"),
        [index] if !first_text(&contents[*index]).starts_with(marker) => {
            fail("the summary message does not start with the marker")
        }
        [_] => Ok(()),
        _ => fail("more than one message holds a summary"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(signature: Option<&str>) -> Value {
        let mut part = json!({"functionCall": {"name": "read_file", "args": {"path": "a"}}});
        if let Some(signature) = signature {
            part["thoughtSignature"] = json!(signature);
        }
        json!({"role": "model", "parts": [part]})
    }

    fn response() -> Value {
        json!({"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {"output": "x"}}}]})
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "parts": [{"text": text}]})
    }

    fn check_contents(contents: Vec<Value>, model: &str) -> Result<(), String> {
        let request = json!({"contents": contents});
        check(&request, model, "key", request.to_string().as_bytes(), None)
    }

    #[test]
    fn a_separated_pair_is_refused_with_geminis_messages() {
        let signed = signature_for("r1");
        let whole = vec![user("go"), call(Some(&signed)), response(), user("thanks")];
        assert_eq!(check_contents(whole, "gemini-3-flash-preview"), Ok(()));
        let orphan_response = check_contents(vec![user("summary"), response()], "gemini-2.5-flash");
        assert!(orphan_response
            .unwrap_err()
            .contains("function response turn comes immediately after a function call turn"));
        let call_after_model = vec![
            user("go"),
            json!({"role": "model", "parts": [{"text": "hm"}]}),
            call(None),
            response(),
        ];
        let refused = check_contents(call_after_model, "gemini-2.5-flash").unwrap_err();
        assert!(refused.contains("function call turn comes immediately after a user turn"));
        let doubled =
            json!({"role": "user", "parts": [response()["parts"][0], response()["parts"][0]]});
        let refused =
            check_contents(vec![user("go"), call(None), doubled], "gemini-2.5-flash").unwrap_err();
        assert!(refused.contains("number of function response parts is equal"));
    }

    #[test]
    fn gemini_3_wants_the_current_turns_signatures_back_unaltered() {
        let unsigned = vec![user("go"), call(None), response()];
        assert!(check_contents(unsigned.clone(), "gemini-3-pro-preview")
            .unwrap_err()
            .contains("missing a thought_signature"));
        assert_eq!(
            check_contents(unsigned, "gemini-2.5-pro"),
            Ok(()),
            "2.5 does not require them"
        );
        let older_turn = vec![user("go"), call(None), response(), user("next")];
        assert_eq!(
            check_contents(older_turn, "gemini-3-pro-preview"),
            Ok(()),
            "only the current turn is validated"
        );
        let stand_in = vec![
            user("go"),
            call(Some("skip_thought_signature_validator")),
            response(),
        ];
        assert_eq!(check_contents(stand_in, "gemini-3-pro-preview"), Ok(()));
        let forged = crate::gemini::encode(b"r1.000000000000000000000000");
        let altered = vec![user("go"), call(Some(&forged)), response()];
        assert_eq!(
            check_contents(altered, "gemini-2.5-flash"),
            Err("Corrupted thought signature.".into())
        );
    }

    #[test]
    fn unknown_fields_and_roles_are_refused_as_protobuf_does() {
        let request = json!({"model": "gemini-2.5-flash", "contents": [user("hi")]});
        let refused = check(&request, "gemini-2.5-flash", "key", b"", None).unwrap_err();
        assert_eq!(
            refused,
            "Invalid JSON payload received. Unknown name \"model\": Cannot find field."
        );
        let typed = json!({"role": "user", "parts": [{"type": "text", "text": "hi"}]});
        let refused = check_contents(vec![typed], "gemini-2.5-flash").unwrap_err();
        assert!(refused.contains("Unknown name \"type\" at 'contents[0].parts[0]'"));
        let assistant = json!({"role": "assistant", "parts": [{"text": "hi"}]});
        assert_eq!(
            check_contents(vec![assistant], "gemini-2.5-flash"),
            Err("Please use a valid role: user, model.".into())
        );
        let snake = json!({"role": "user", "parts": [{"inline_data": {"mime_type": "image/png", "data": "AA=="}}]});
        assert_eq!(
            check_contents(vec![snake], "gemini-2.5-flash"),
            Ok(()),
            "the proto's own names are accepted"
        );
    }
}
