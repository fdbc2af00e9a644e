"""A long conversation through Condenser with an official SDK, against a real
llama.cpp server whose window is far smaller than the conversation.

Run by tests/api/realllm.rs with CONDENSER_URL, PROTOCOL (openai or
anthropic), STREAM (1 or 0) and TURNS set. Every turn must succeed; one JSON
line per turn on stdout says what Condenser did. Exits non-zero, with the
reason on stderr, otherwise."""
import json
import os
import sys

URL = os.environ["CONDENSER_URL"]
PROTOCOL = os.environ["PROTOCOL"]
STREAM = os.environ["STREAM"] == "1"
TURNS = int(os.environ["TURNS"])
SYSTEM = "You are a helpful assistant. Answer in one short sentence."
FACT = "Remember this for later: the launch code is PELICAN-4417."
NOTES = ("The design review covered the storage layer, the retry policy, the "
         "dashboard colours, the deployment checklist and the on-call rota. "
         "Everyone agreed the migration should wait until the next release, "
         "that the cache needs a smaller eviction window, and that the team "
         "will meet again on Thursday to look at the error budget and the "
         "alerts that fired during the load test last week.")


def user_text(turn):
    head = FACT if turn == 1 else f"Here are the notes of meeting {turn}."
    return f"{head} {NOTES} What is the main point of meeting {turn}?"


def openai_turn(client, messages):
    kwargs = dict(model="smollm2", messages=[{"role": "system", "content": SYSTEM}] + messages,
                  max_tokens=24, temperature=0)
    if not STREAM:
        raw = client.chat.completions.with_raw_response.create(**kwargs)
        return raw.headers, raw.parse().choices[0].message.content or ""
    raw = client.chat.completions.with_raw_response.create(
        stream=True, stream_options={"include_usage": True}, **kwargs)
    text = ""
    for chunk in raw.parse():
        for choice in chunk.choices:
            text += choice.delta.content or ""
    return raw.headers, text


def anthropic_turn(client, messages):
    kwargs = dict(model="smollm2", system=SYSTEM, messages=messages, max_tokens=24, temperature=0)
    if not STREAM:
        raw = client.messages.with_raw_response.create(**kwargs)
        message = raw.parse()
        return raw.headers, "".join(b.text for b in message.content if b.type == "text")
    raw = client.messages.with_raw_response.create(stream=True, **kwargs)
    text = ""
    for event in raw.parse():
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            text += event.delta.text
    return raw.headers, text


def main():
    if PROTOCOL == "openai":
        from openai import OpenAI
        client = OpenAI(base_url=URL + "/v1", api_key="sk-local", max_retries=0, timeout=600)
        turn_once = openai_turn
    else:
        from anthropic import Anthropic
        client = Anthropic(base_url=URL, api_key="sk-ant-local", max_retries=0, timeout=600)
        turn_once = anthropic_turn
    messages = []
    for turn in range(1, TURNS + 1):
        messages.append({"role": "user", "content": user_text(turn)})
        headers, text = turn_once(client, messages)
        messages.append({"role": "assistant", "content": text.strip() or "(no answer)"})
        print(json.dumps({"turn": turn, "compactions": int(headers.get("x-condenser-compactions", "0")),
                          "compacted_messages": headers.get("x-condenser-compacted-messages")}), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # the SDK's own error says what the client saw
        print(f"{PROTOCOL} stream={STREAM}: {error!r}", file=sys.stderr)
        sys.exit(1)
