"""The top entries of folded stacks (`KEEP_FOLDED=1 bench/flamegraph.sh`):
the frames with the most samples of their own (self), as shares of all
samples, side by side for several graphs of the same workload. (Inclusive
shares say little across builds: what is inlined, and so which async
frames exist, differs between them.)

python3 bench/flame_top.py [--top N] NAME=FOLDED...

A frame's name is shortened to its path without generic arguments or
hashes, so that the same function of two builds falls on one line.
"""

import argparse
import re
from collections import Counter


def qualified(frame):
    """`<Type<T> as Trait>::method` -> `Type<T>::method`: the type names it."""
    if not frame.startswith("<"):
        return frame
    depth = 0
    for i, char in enumerate(frame):
        depth += char == "<"
        depth -= char == ">"
        if depth == 0:
            inner, rest = frame[1:i], frame[i + 1 :]
            return inner.split(" as ", 1)[0] + rest
    return frame


def short(frame):
    frame = re.sub(r"_\[[ikj]\]$", "", frame)  # inferno's marks: inlined, kernel, JIT
    frame = qualified(re.sub(r"::h[0-9a-f]{16}$", "", frame))
    depth, out = 0, []
    for char in frame:  # drop <...> generic arguments, however nested
        if char == "<":
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(char)
    name = "".join(out).strip(" :")
    return name or frame


def self_shares(path):
    own = Counter()
    with open(path) as f:
        for line in f:
            stack, _, weight = line.rstrip("\n").rpartition(" ")
            if stack:
                own[short(stack.rsplit(";", 1)[-1])] += int(weight)
    total = sum(own.values())  # perf's weights (sampling periods)
    return {name: weight / total for name, weight in own.items()}


def table(graphs, top):
    ranked = Counter()
    for shares in graphs.values():
        for frame, share in shares.items():
            ranked[frame] = max(ranked[frame], share)
    print("| frame (self) | " + " | ".join(graphs) + " |")
    print("|---|" + "---|" * len(graphs))
    for frame, _ in ranked.most_common(top):
        cells = [f"{shares.get(frame, 0):.1%}" for shares in graphs.values()]
        print(f"| `{frame}` | " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("graphs", nargs="+", metavar="NAME=FOLDED")
    args = parser.parse_args()
    graphs = {}
    for item in args.graphs:
        name, _, path = item.partition("=")
        graphs[name] = self_shares(path)
    table(graphs, args.top)


if __name__ == "__main__":
    main()
