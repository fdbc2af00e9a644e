"""One 20-step tool loop on the Responses API, over a socket or over HTTP.

    websocket_loop.py socket|http BASE_URL STEPS  ->  one JSON line per step

A coding agent's turn as Codex runs it: a user message asking for tools,
then a function_call_output for each call until the model answers. Over
the socket each step sends only its new items with `previous_response_id`
(Codex's incremental requests); over HTTP each step resends the whole
history (`store: false`). Needs the `websockets` package for the socket.
"""
import json
import sys
import time
import urllib.request

MODE, BASE, STEPS = sys.argv[1], sys.argv[2].rstrip("/"), int(sys.argv[3])
KEY = "sk-bench-websocket"
FIELDS = {
    "model": "bench-model",
    "instructions": "You are a coding agent.",
    "tools": [{"type": "function", "name": "read_file", "description": "Read a file", "strict": False,
               "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "store": False,
    "stream": True,
}
EXCERPT = "".join(f"    fn step_{i}(state: &mut State) -> Result<()> {{ state.advance({i})?; Ok(()) }}\n" for i in range(12))


def new_items(output, step):
    calls = [item for item in output if item.get("type") == "function_call"]
    more = "[more]" if step < STEPS else ""
    if calls:
        return [{"type": "function_call_output", "call_id": c["call_id"], "output": f"{more}\n{EXCERPT}"} for c in calls]
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Read the crate. [tools]\n{EXCERPT}"}]}]


def over_http(history):
    body = json.dumps({**FIELDS, "input": history}).encode()
    request = urllib.request.Request(BASE + "/v1/responses", data=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=600) as response:
        for line in response:
            if line.startswith(b"data: "):
                event = json.loads(line[6:])
                if event.get("type") == "response.completed":
                    return event["response"]
    raise RuntimeError("no response.completed")


def over_socket(socket, items, previous):
    frame = {"type": "response.create", **FIELDS, "input": items}
    if previous:
        frame["previous_response_id"] = previous
    socket.send(json.dumps(frame))
    while True:
        event = json.loads(socket.recv(timeout=600))
        if event.get("type") == "response.completed":
            return event["response"]
        if event.get("type") in ("error", "response.failed"):
            raise RuntimeError(json.dumps(event))


def main():
    socket = None
    if MODE == "socket":
        from websockets.sync.client import connect
        url = BASE.replace("http://", "ws://", 1) + "/v1/responses"
        socket = connect(url, additional_headers={
            "Authorization": f"Bearer {KEY}", "OpenAI-Beta": "responses_websockets=2026-02-06"})
    history, output, previous = [], [], None
    for step in range(1, STEPS + 1):
        items = new_items(output, step)
        history.extend(items)
        started = time.monotonic()
        if socket:
            response = over_socket(socket, items, previous)
        else:
            response = over_http(history)
        seconds = time.monotonic() - started
        output = response.get("output", [])
        history.extend(output)
        previous = response.get("id")
        sent = len(json.dumps(items if socket else history))
        print(json.dumps({"step": step, "seconds": seconds, "bytes_sent": sent}), flush=True)
    if socket:
        socket.close()


main()
