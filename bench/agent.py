"""One agent conversation through Condenser, timed turn by turn.

    agent.py URL TURNS  ->  one JSON line per turn on stdout

Each turn sends the whole history plus a new user message of about 1.6 KB,
as coding agents do (a request, a file excerpt), and appends the answer.
The history outgrows the upstream's window after a dozen turns, so the
conversation is compacted every few turns from then on. Standard library
only: the benchmark needs nothing installed.
"""
import json
import sys
import time
import urllib.request

URL, TURNS = sys.argv[1], int(sys.argv[2])
SYSTEM = "You are a coding agent. Answer briefly."
EXCERPT = "".join(
    f"    fn step_{i}(state: &mut State) -> Result<()> {{ state.advance({i})?; Ok(()) }}\n"
    for i in range(20)
)


def turn(messages):
    body = json.dumps({"model": "bench-model", "max_tokens": 256, "messages": messages}).encode()
    request = urllib.request.Request(
        URL + "/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-bench"},
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as response:
        answer = json.load(response)
        compactions = int(response.headers.get("x-condenser-compactions", "0"))
    return time.monotonic() - started, compactions, answer["choices"][0]["message"]["content"]


def main():
    messages = [{"role": "system", "content": SYSTEM}]
    for number in range(1, TURNS + 1):
        ask = f"Step {number}: review this excerpt and say what to change.\n{EXCERPT}"
        messages.append({"role": "user", "content": ask})
        seconds, compactions, text = turn(messages)
        messages.append({"role": "assistant", "content": text})
        print(json.dumps({"turn": number, "seconds": seconds, "compactions": compactions}), flush=True)


if __name__ == "__main__":
    main()
