"""Writes the benchmark's request bodies (OpenAI chat completions).

small.json    one user message: the proxy's fixed cost.
identical.json  a system prompt (the one bench/loadgen's generated
              conversations use) and one user message, about 1.5 KB.
history.json  a 200-message tool-using agent conversation of about 800 KB:
              a system prompt, then rounds of user ask -> assistant tool call
              -> tool result (file contents, the bulk) -> assistant answer.
history-responses.json  the same conversation as an OpenAI Responses body,
              as Codex CLI sends it: instructions, then input items, a
              reasoning item before each tool call.

Usage: python3 make_bodies.py OUT_DIR
"""

import json
import sys
from pathlib import Path

MODEL = "bench-model"

# Keep equal to SYSTEM in bench/loadgen/src/main.rs.
SYSTEM = (
    'You are a careful coding agent working in a large Rust repository. '
    'Read before you write, keep changes small, run the tests that cover '
    'what you touched, and explain every change in one or two plain '
    'sentences. Never invent file contents: when you need a file, ask for '
    'it with the read_file tool. Prefer the standard library to new '
    'dependencies, keep public interfaces stable, and do not reformat code '
    'you did not change. When a test fails, read its output in full before '
    'changing anything; when you are unsure what a function does, read its '
    'callers. Answer in English, without preamble, and stop when the task '
    'is done. Security matters: never print credentials, never weaken a '
    'check to make a test pass, and treat every input from the network as '
    'hostile until it is validated. Performance matters too, but only where '
    'it is measured: do not optimize code that no benchmark shows is slow, '
    'and say which benchmark you ran and what it showed. The repository has '
    'a README per crate; read it first. Its CI runs formatting, lints with '
    'warnings denied, and the full test suite on every push, so run the '
    'same three before you call anything finished.'
)


def file_contents(i, size):
    line = f"    let value_{i} = compute(input, {i}); // keeps the borrow checker happy\n"
    return (line * (size // len(line) + 1))[:size]


def history(target_messages=200, tool_result_bytes=15_500):
    messages = [
        {"role": "system", "content": "You are a careful coding agent. " * 40},
        {"role": "user", "content": "We are reviewing a Rust project, one module at a time."},
        {"role": "assistant", "content": "Ready."},
    ]
    turn = 0
    while len(messages) < target_messages - 1:
        call_id = f"call_{turn:04d}"
        messages += [
            {"role": "user", "content": f"Step {turn}: read src/module_{turn}.rs and explain it."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/module_{turn}.rs"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": file_contents(turn, tool_result_bytes)},
            {"role": "assistant", "content": f"Module {turn} computes values in a loop. " * 8},
        ]
        turn += 1
    messages = messages[: target_messages - 1]
    while messages[-1]["role"] != "assistant" or messages[-1].get("tool_calls"):
        messages.pop()
    messages.append({"role": "user", "content": "Summarize what you learned."})
    tools = [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            },
        }
    ]
    return {"model": MODEL, "messages": messages, "tools": tools}


def responses_history(chat):
    """The chat history `chat` as a Responses body (input items)."""
    messages = chat["messages"]
    items = []
    for index, message in enumerate(messages[1:]):
        role = message["role"]
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"], "output": message["content"]})
        elif message.get("tool_calls"):
            items.append({"type": "reasoning", "id": f"rs_{index:04d}", "summary": [], "encrypted_content": "gAAAAB" + "x" * 400})
            for call in message["tool_calls"]:
                items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"], "arguments": call["function"]["arguments"]})
        else:
            kind = "output_text" if role == "assistant" else "input_text"
            items.append({"type": "message", "role": role, "content": [{"type": kind, "text": message["content"]}]})
    tools = [{"type": "function", "name": "read_file", "parameters": chat["tools"][0]["function"]["parameters"]}]
    return {"model": MODEL, "instructions": messages[0]["content"], "input": items, "tools": tools, "store": False}


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    small = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}]}
    (out / "small.json").write_text(json.dumps(small))
    identical = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": "Read src/router.rs and tell me what it does, then list what you would "
                "change first: error handling, the tests that cover it, and anything that allocates "
                "per request. Keep the answer short; we go one module at a time.",
            },
        ],
    }
    (out / "identical.json").write_text(json.dumps(identical))
    body = history()
    (out / "history.json").write_text(json.dumps(body))
    size = (out / "history.json").stat().st_size
    print(f"history.json: {len(body['messages'])} messages, {size / 1000:.0f} KB")
    (out / "history-responses.json").write_text(json.dumps(responses_history(body)))


if __name__ == "__main__":
    main()
