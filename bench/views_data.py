"""Writes one very long conversation into a migrated Condenser database.

The operator views' benchmark (bench/views.sh) reads it back. The rows go
in the exact schema the migrations made (run `condenser migrate` first):
the conversation's messages (a main line with dead-end branches off it, as
an agent that edits and regenerates leaves them), its heads (one per
branch), its compactions (prefixes of the main line, each on the previous
one), the request rows the chart reads (the newest ones a conversation
keeps), and its row in the conversation list; beside it, small
conversations of another tenant, so the list has a page to show.

Columns a newer schema adds are filled when present (`reached_messages`,
`reached_bytes`, the compaction's `conversation`, the head's `position`),
with the values the write path keeps; a schema without them is left for
its migrations to fill.

Usage: python3 views_data.py sqlite FILE | postgres URL
Environment: MESSAGES (100000), COMPACTIONS (10000), BRANCHES (3000),
REQUESTS (2214), SMALL (300: small conversations beside it).
Prints `TENANT CONVERSATION` of the long conversation.
"""

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import uuid

MESSAGES = int(os.environ.get("MESSAGES", "100000"))
COMPACTIONS = int(os.environ.get("COMPACTIONS", "10000"))
BRANCHES = int(os.environ.get("BRANCHES", "3000"))
REQUESTS = int(os.environ.get("REQUESTS", "2214"))
SMALL = int(os.environ.get("SMALL", "300"))

START_MS = 1_790_000_000_000
STEP_MS = 2_000  # between messages of the long conversation
WINDOW = 128_000

rng = random.Random(52)
WORDS = (
    "the parser reads a token stream and builds the tree while the checker "
    "walks it twice once for names and once for types then the emitter "
    "writes each function with its locals and the tests compare every "
    "output byte for byte against the fixtures kept in the repository "
).split()
TEXT = " ".join(rng.choice(WORDS) for _ in range(40_000))


def digest(*parts):
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()


def body(role, n):
    start = rng.randrange(0, len(TEXT) - n)
    return json.dumps({"role": role, "content": TEXT[start : start + n]})


def size():
    # Mostly short turns, some long tool results: about 2 KB on average.
    return rng.choice((300, 600, 900, 1_500, 2_000, 2_500, 6_000))


class Rows:
    def __init__(self):
        self.messages = []
        self.heads = []
        self.compactions = []
        self.requests = []
        self.conversations = []


def long_conversation(rows):
    tenant = digest("tenant", "long")
    conversation = digest("session", tenant, "bench-session")
    branch_messages = BRANCHES * 2
    main_len = MESSAGES - branch_messages  # positions 1..main_len
    root = digest(tenant, "root")
    at = START_MS
    rows.messages.append(
        (tenant, root, None, 0, "system", body("system", 1_200), at, "bench-session")
    )
    main = [root]
    for position in range(1, main_len + 1):
        at += STEP_MS
        role = "user" if position % 2 else "assistant"
        hash_ = digest(tenant, "main", position)
        rows.messages.append(
            (tenant, hash_, main[-1], position, role, body(role, size()), at, "bench-session")
        )
        main.append(hash_)
    # Dead ends: an edit and its answer every so many messages.
    heads = [(main[-1], at, main_len)]
    every = max(1, main_len // (BRANCHES + 1))
    for branch in range(BRANCHES):
        at_position = (branch + 1) * every
        parent = main[at_position - 1]
        created = START_MS + at_position * STEP_MS + 500
        for depth in range(2):
            hash_ = digest(tenant, "branch", branch, depth)
            role = "user" if (at_position + depth) % 2 else "assistant"
            rows.messages.append(
                (tenant, hash_, parent, at_position + depth, role, body(role, size()),
                 created, "bench-session")
            )
            parent = hash_
        heads.append((parent, created, at_position + 1))
    for head, created, position in heads:
        rows.heads.append((tenant, conversation, head, created, position))
    # Compactions: prefixes of the main line up to its last few messages,
    # each folding in the last.
    base, previous = root, 0
    for k in range(COMPACTIONS):
        prefix_len = (k + 1) * (main_len - 10) // COMPACTIONS
        prefix = main[prefix_len]
        summary = TEXT[k % 1_000 : k % 1_000 + 1_800]
        created = START_MS + prefix_len * STEP_MS + 900
        row = {
            "tenant": tenant, "prefix_hash": prefix, "base_hash": base,
            "prefix_len": prefix_len, "summary": summary, "summary_tokens": 450,
            "messages_compacted": prefix_len - previous, "tokens_before": 5_200,
            "tokens_after": 2_100, "model": "gpt-5",
            "trigger": "proactive" if k % 5 else "overflow",
            "trims": "[]", "duration_ms": 2_500 + k % 900, "created_at": created,
            "conversation": conversation,
        }
        rows.compactions.append(row)
        base, previous = prefix, prefix_len
    # The newest requests, as the table keeps them: a sawtooth of 2-5k
    # tokens, each request three messages longer than the last.
    compacted = {c["prefix_len"] for c in rows.compactions}
    first = main_len - 3 * (REQUESTS - 1)
    last_compacted = max((p for p in compacted if p <= first - 3), default=None)
    for n in range(REQUESTS):
        length = first + 3 * n
        done = [p for p in range(length - 2, length + 1) if p in compacted]
        compactions = len(done)
        if done:
            last_compacted = done[-1]
        kept = length - (last_compacted or 0)
        estimated = 2_000 + kept * 300 + rng.randrange(0, 200)
        reported = estimated - rng.randrange(0, 150)
        created = START_MS + length * STEP_MS + 100
        rows.requests.append({
            "tenant": tenant, "root": root, "conversation": conversation,
            "id": str(uuid.UUID(int=(created << 80) | (0x7 << 76) | n)),
            "head": main[length], "messages": length, "model": "gpt-5", "upstream": "openai",
            "status": 200, "sent_bytes": estimated * 4, "estimated_tokens": estimated,
            "upstream_input_tokens": reported, "window_tokens": WINDOW,
            "compacted_messages": last_compacted, "compactions": compactions,
            "overflows": 1 if compactions and n % 5 == 0 else 0,
            "compaction_error": None, "degraded": 0, "created_at": created,
        })
    newest = rows.requests[-1]
    reached = [m for m in rows.messages if m[0] == tenant]
    rows.conversations.append({
        "tenant": tenant, "conversation": conversation, "root": root,
        "label": "bench-session", "head": main[-1], "messages": main_len,
        "branches": 1 + BRANCHES, "requests": 30_000, "compactions": COMPACTIONS,
        "tokens": newest["upstream_input_tokens"], "window_tokens": WINDOW, "model": "gpt-5",
        "pruned_at": None, "last_activity": at + 60_000, "created_at": START_MS,
        "reached_messages": len(reached) - 1,
        "reached_bytes": sum(len(m[5]) for m in reached),
    })
    return tenant, conversation


def small_conversations(rows):
    tenant = digest("tenant", "small")
    root = digest(tenant, "root")
    system = body("system", 800)
    rows.messages.append((tenant, root, None, 0, "system", system, START_MS, None))
    for c in range(SMALL):
        parent, at, total = root, START_MS + c * 10_000, len(system)
        chain = []
        for position in range(1, 11):
            role = "user" if position % 2 else "assistant"
            hash_ = digest(tenant, c, position)
            text = body(role, size())
            total += len(text)
            rows.messages.append((tenant, hash_, parent, position, role, text, at, f"small-{c}"))
            chain.append(hash_)
            parent, at = hash_, at + 1_000
        rows.heads.append((tenant, chain[0], parent, at, 10))
        rows.conversations.append({
            "tenant": tenant, "conversation": chain[0], "root": root, "label": f"small-{c}",
            "head": parent, "messages": 10, "branches": 1, "requests": 5, "compactions": 0,
            "tokens": 3_000, "window_tokens": WINDOW, "model": "gpt-5", "pruned_at": None,
            "last_activity": at, "created_at": START_MS + c * 10_000,
            "reached_messages": 10, "reached_bytes": total,
        })


def message_rows(rows):
    for tenant, hash_, parent, position, role, text, at, label in rows.messages:
        yield (tenant, hash_, parent, position, role, text, len(text), len(text) // 4, label, at)


MESSAGE_INSERT = ("tenant", "hash", "parent", "position", "role", "body", "bytes",
                  "token_estimate", "label", "created_at")
HEAD_COLUMNS = ("tenant", "conversation", "head", "created_at", "position")


def head_columns(existing):
    """The head's position, where the schema records it."""
    return HEAD_COLUMNS if "position" in existing else HEAD_COLUMNS[:4]


def dict_rows(dicts, columns):
    return [tuple(d.get(c) for c in columns) for d in dicts]


def write_sqlite(path, rows):
    import sqlite3

    db = sqlite3.connect(path)
    existing = {t: [r[1] for r in db.execute(f"pragma table_info({t})")]
                for t in ("compactions", "requests", "conversations", "conversation_heads")}
    db.executemany(insert_sql("messages", MESSAGE_INSERT, "?"), message_rows(rows))
    heads = head_columns(existing["conversation_heads"])
    db.executemany(insert_sql("conversation_heads", heads, "?"),
                   [row[: len(heads)] for row in rows.heads])
    for table, dicts in (("compactions", rows.compactions), ("requests", rows.requests),
                         ("conversations", rows.conversations)):
        db.executemany(insert_sql(table, existing[table], "?"), dict_rows(dicts, existing[table]))
    db.commit()
    db.execute("analyze")
    db.commit()
    db.close()


def insert_sql(table, columns, mark):
    return f"insert into {table} ({', '.join(columns)}) values ({', '.join(mark for _ in columns)})"


def csv_field(value):
    """COPY's CSV: NULL is an unquoted empty field, text always quoted."""
    if value is None:
        return ""
    if isinstance(value, str):
        return '"' + value.replace('"', '""') + '"'
    return str(value)


def write_postgres(url, rows):
    def psql(*args, **kwargs):
        return subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", url, *args],
                              check=True, text=True, capture_output=True, **kwargs).stdout

    existing = {}
    for table in ("compactions", "requests", "conversations", "conversation_heads"):
        names = psql("-At", "-c", "select column_name from information_schema.columns "
                     f"where table_name = '{table}' order by ordinal_position")
        existing[table] = names.split()
    with tempfile.TemporaryDirectory() as folder:
        copies = []
        for table, columns, data in (
            ("messages", MESSAGE_INSERT, message_rows(rows)),
            ("conversation_heads", head_columns(existing["conversation_heads"]),
             [row[: len(head_columns(existing["conversation_heads"]))] for row in rows.heads]),
            ("compactions", existing["compactions"],
             dict_rows(rows.compactions, existing["compactions"])),
            ("requests", existing["requests"], dict_rows(rows.requests, existing["requests"])),
            ("conversations", existing["conversations"],
             dict_rows(rows.conversations, existing["conversations"])),
        ):
            file = os.path.join(folder, f"{table}.csv")
            with open(file, "w") as out:
                for row in data:
                    out.write(",".join(csv_field(v) for v in row) + "\n")
            copies.append(f"\\copy {table} ({', '.join(columns)}) from '{file}' with (format csv)")
        script = os.path.join(folder, "load.sql")
        with open(script, "w") as out:
            out.write("\n".join(copies) + "\nanalyze;\n")
        psql("-f", script)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("sqlite", "postgres"):
        sys.exit(__doc__)
    rows = Rows()
    tenant, conversation = long_conversation(rows)
    small_conversations(rows)
    if sys.argv[1] == "sqlite":
        write_sqlite(sys.argv[2], rows)
    else:
        write_postgres(sys.argv[2], rows)
    print(tenant, conversation)


if __name__ == "__main__":
    main()
