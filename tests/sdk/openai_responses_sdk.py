"""The official OpenAI SDK's Responses API through Condenser: a 30-turn
tool-using agent, alternating `responses.create` and `responses.stream`,
with reasoning items passed back as Codex does (`store=False`, encrypted
content included), across several compactions.

Run by tests/api/sdk.rs with CONDENSER_URL and API_KEY set; exits non-zero
(with the reason on stderr) when anything is not what a user expects."""
import os
import sys

from openai import OpenAI

client = OpenAI(base_url=os.environ["CONDENSER_URL"] + "/v1", api_key=os.environ["API_KEY"], max_retries=0)
MODEL = os.environ["MODEL"]
TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file", "strict": False,
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]
OPTIONS = dict(model=MODEL, instructions="You are a coding agent.", tools=TOOLS, store=False,
               reasoning={"effort": "low"}, include=["reasoning.encrypted_content"])
ROUNDS = 3


def create(history):
    raw = client.responses.with_raw_response.create(input=history, **OPTIONS)
    return raw.parse(), int(raw.headers.get("x-condenser-compactions", "0"))


def stream(history):
    text = ""
    with client.responses.stream(input=history, **OPTIONS) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                text += event.delta
        response = events.get_final_response()
    assert text == response.output_text, (text, response.output_text)
    return response, 0


def raw_stream(history):
    """Streamed without the helper, to read the headers: a compaction that
    outlasts the keep-alive interval answers early, then keep-alives."""
    global early
    raw = client.responses.with_raw_response.create(input=history, stream=True, **OPTIONS)
    early += raw.headers.get("x-condenser-compacting") == "streamed"
    response = None
    for event in raw.parse():
        if event.type == "response.completed":
            response = event.response
    return response, int(raw.headers.get("x-condenser-compactions", "0"))


history = []
compactions, streamed, early = 0, 0, 0
for turn in range(1, 31):
    history.append({"role": "user", "content": f"Turn {turn}: inspect module {turn}. [tools]"})
    for round_ in range(ROUNDS + 1):
        send = [create, stream, raw_stream][(turn + round_) % 3]
        streamed += send is not create
        response, compacted = send(history)
        compactions += compacted
        assert response.status == "completed", response
        assert response.usage.input_tokens > 0
        history += [item.model_dump(exclude_none=True) for item in response.output]
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            assert response.output_text, response
            break
        assert response.output[0].type == "reasoning" and response.output[0].encrypted_content
        more = "[more]" if round_ + 1 < ROUNDS else "done"
        for call in calls:
            history.append({"type": "function_call_output", "call_id": call.call_id,
                            "output": f"contents of module {turn} round {round_} {more} " + "lorem ipsum " * 120})

assert streamed > 30, streamed
assert early > 0, "no streamed request outlasted the keep-alive interval"
print(f"openai responses sdk ok: {len(history)} items, {compactions} compactions reported in headers, "
      f"{early} streams answered early with keep-alives", file=sys.stderr)
