"""Ollama's own Python client (`ollama` 0.6.x) through Condenser's native
`/api/chat` adapter: a conversation of TURNS turns, each a user message and
the tool rounds the model asks for, streamed or not (STREAM), with the
window set by `options.num_ctx` (NUM_CTX) or left to the server's default.

Run by tests/api/local_servers.rs with CONDENSER_URL set; exits non-zero
(with the reason on stderr) when anything is not what a user expects."""
import os
import sys

from ollama import Client

client = Client(host=os.environ["CONDENSER_URL"])
MODEL = os.environ["MODEL"]
TURNS = int(os.environ.get("TURNS", "20"))
STREAM = os.environ.get("STREAM") == "1"
NUM_CTX = os.environ.get("NUM_CTX")
OPTIONS = {"num_ctx": int(NUM_CTX)} if NUM_CTX else None
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


def ask(messages):
    """One request: the assistant's message as the client sees it."""
    if not STREAM:
        return client.chat(model=MODEL, messages=messages, tools=TOOLS, options=OPTIONS).message
    content, calls, done = "", [], None
    for part in client.chat(model=MODEL, messages=messages, tools=TOOLS, options=OPTIONS, stream=True):
        content += part.message.content or ""
        calls += part.message.tool_calls or []
        if part.done:
            done = part
    assert done is not None and done.prompt_eval_count, "the stream ended with its counts"
    return {"role": "assistant", "content": content, "tool_calls": calls}


def as_dict(message):
    return message if isinstance(message, dict) else message.model_dump(exclude_none=True)


messages = [{"role": "system", "content": "You are a coding agent. Use tools to inspect files."}]
for turn in range(1, TURNS + 1):
    log = " ".join(f"line {turn}.{i}: request handled in {i * 7 % 300} ms" for i in range(40))
    messages.append({"role": "user", "content": f"Turn {turn}: read this log and the file. [tools]\n{log}"})
    for round in range(3):
        reply = as_dict(ask(messages))
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            break
        for call in calls:
            function = call["function"] if isinstance(call, dict) else call.function
            name = function["name"] if isinstance(function, dict) else function.name
            more = "[more]" if round == 0 else "done"
            messages.append({"role": "tool", "tool_name": name,
                             "content": f"{more} contents of module {turn}: " + "fn x() {} " * 60})
    assert messages[-1]["role"] == "assistant" and messages[-1].get("content"), f"turn {turn}: no answer"
print(f"ollama client ok: {TURNS} turns, {len(messages)} messages", file=sys.stderr)
