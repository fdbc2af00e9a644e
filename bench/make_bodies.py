"""Writes the benchmark's request bodies (OpenAI chat completions).

small.json    one user message: the proxy's fixed cost.
history.json  a 200-message tool-using agent conversation of about 800 KB:
              a system prompt, then rounds of user ask -> assistant tool call
              -> tool result (file contents, the bulk) -> assistant answer.

Usage: python3 make_bodies.py OUT_DIR
"""

import json
import sys
from pathlib import Path

MODEL = "bench-model"


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


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    small = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}]}
    (out / "small.json").write_text(json.dumps(small))
    body = history()
    (out / "history.json").write_text(json.dumps(body))
    size = (out / "history.json").stat().st_size
    print(f"history.json: {len(body['messages'])} messages, {size / 1000:.0f} KB")


if __name__ == "__main__":
    main()
