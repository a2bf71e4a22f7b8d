"""Facts a compacted session keeps: a session plants one fact early, runs on for filler turns, then
asks for the fact, its history whole, compacted (`POST /v1/responses/compact`) or cut to the
compacted window's size (its oldest items dropped).

    python bench/compaction.py [--model PATH_OR_ID] [--filler 12] [--facts 6]
                               [--summary-tokens 256]

Each trial plants one fact, either in a user message or in a tool's output (a `read_file` call
the user asked for: only the summary can carry it), then --filler turns of canned question and
answer (~60 tokens each), as stateless input. For each trial, interleaved: the question asked
after the whole history (`full`, the ceiling), after the compaction item (`compacted`), and after
the history's latest items that fit the compacted prompt's size (`cut`, what dropping old turns
keeps). Two figures each: `carried`, the fact is in what the question's prompt reads (the
compacted window opened with the server's key from OMNI_HOME: the kept user messages and the
model's summary); `answered`, the answer (greedy, at most 24 tokens) holds the fact's value,
which also measures the model. Prints both per placement and condition, and the median
per-trial ratio of compacted to full prompt tokens; writes bench/out/compaction.json.
Default model: SmolLM2-135M.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _plot import write_results  # noqa: E402
from _server import model_or_tiny, start_omni  # noqa: E402

from omni.cli.options import omni_home  # noqa: E402
from omni.service.sealing import FOR_WINDOW, Sealer  # noqa: E402

FACTS = [  # (statement, question, value)
    ("The deploy code is 7391.", "What is the deploy code?", "7391"),
    ("The build server is named Orion.", "What is the build server named?", "Orion"),
    ("The release meeting is on Thursday.", "Which day is the release meeting?", "Thursday"),
    ("The project budget is 4500 dollars.", "What is the project budget?", "4500"),
    ("The database listens on port 6543.", "Which port does the database listen on?", "6543"),
    ("The on-call engineer is Priya.", "Who is the on-call engineer?", "Priya"),
    ("The staging bucket is called tern-blue.", "What is the staging bucket called?", "tern-blue"),
    ("The API rate limit is 120 requests.", "What is the API rate limit?", "120"),
]
FILLER = [
    ("How do I list files in a folder?", "Use ls to list the files; ls -la also shows hidden"),
    ("What does git status show?", "It shows changed, staged and untracked files in the repo"),
    ("How do I make a new branch?", "Run git switch -c followed by the new branch's name"),
    ("What is a virtual environment?", "A folder with its own Python and packages, apart"),
    ("How do I run the tests?", "Run pytest from the project root; add -x to stop early"),
    ("What is a pull request?", "A proposal to merge one branch's commits into another"),
]
INSTRUCTIONS = "You are a helpful assistant. Answer briefly."
ASK = "Answer from what was said above, with the value only."
CONDITIONS = ("full", "compacted", "cut")
TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def said(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": text}


def session(statement: str, where: str, filler: int) -> list[dict[str, Any]]:
    """The fact, planted in a user message or a tool's output, then `filler` turns."""
    if where == "user":
        items = [user(f"Please keep this in mind. {statement}"), said("Noted.")]
    else:
        call = {"type": "function_call", "call_id": "c1", "name": "read_file"}
        items = [
            user("Read notes.txt for me."),
            {**call, "arguments": '{"path": "notes.txt"}'},
            {"type": "function_call_output", "call_id": "c1", "output": f"notes.txt: {statement}"},
            said("I read notes.txt."),
        ]
    for i in range(filler):
        question, answer = FILLER[i % len(FILLER)]
        items += [user(f"{question} Explain in a few words."), said(f"{answer}. " * 2)]
    return items


class Client:
    def __init__(self, http: httpx.Client, model: str):
        self.http, self.model = http, model

    def body(self, items: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        return {"model": self.model, "instructions": INSTRUCTIONS, "tools": TOOLS,
                "input": items, "temperature": 0, **fields}  # fmt: skip

    def count(self, items: list[dict[str, Any]]) -> int:
        r = self.http.post("/v1/responses/input_tokens", json=self.body(items))
        r.raise_for_status()
        return int(r.json()["input_tokens"])

    def ask(self, items: list[dict[str, Any]], question: str) -> tuple[str, int]:
        asked = user(f"{question} {ASK}")
        request = self.body([*items, asked], max_output_tokens=24, tool_choice="none")
        r = self.http.post("/v1/responses", json=request)
        r.raise_for_status()
        answer = r.json()
        text = "".join(
            part.get("text", "")
            for item in answer["output"]
            if item["type"] == "message"
            for part in item["content"]
        )
        return text, int(answer["usage"]["input_tokens"])

    def compact(self, items: list[dict[str, Any]], tokens: int) -> tuple[dict[str, Any], int]:
        body = self.body(items, max_output_tokens=tokens)  # the summary's cap
        r = self.http.post("/v1/responses/compact", json=body)
        r.raise_for_status()
        compacted = r.json()
        return compacted["output"][0], int(compacted["usage"]["output_tokens"])


def cut(client: Client, items: list[dict[str, Any]], tokens: int) -> list[dict[str, Any]]:
    """The latest items whose prompt fits `tokens` (whole turns: it starts at a user message)."""
    starts = [i for i, item in enumerate(items) if item.get("role") == "user"]
    for start in starts:
        if client.count(items[start:]) <= tokens:
            return items[start:]
    return items[starts[-1] :]


def trial(
    client: Client, sealer: Sealer, fact: tuple[str, str, str], where: str, args: Any
) -> dict[str, Any]:
    statement, question, value = fact
    items = session(statement, where, args.filler)
    item, summary_tokens = client.compact(items, args.summary_tokens)
    window = sealer.open(item["encrypted_content"], "input", FOR_WINDOW)
    compacted_tokens = client.count([item, user(f"{question} {ASK}")])
    short = cut(client, items, compacted_tokens)
    read = {"full": items, "compacted": window, "cut": short}
    sent = {"full": items, "compacted": [item], "cut": short}
    row: dict[str, Any] = {"fact": value, "where": where, "summary_tokens": summary_tokens}
    for name, window_items in sent.items():
        answer, prompt = client.ask(window_items, question)
        row[name] = {
            "carried": value.lower() in json.dumps(read[name]).lower(),
            "answered": value.lower() in answer.lower(),
            "tokens": prompt,
            "answer": answer,
        }
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--filler", type=int, default=12, help="filler turns after the fact")
    p.add_argument("--facts", type=int, default=6, help=f"facts tried (at most {len(FACTS)})")
    p.add_argument("--summary-tokens", type=int, default=256, help="the summary's cap")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_path, model_id = model_or_tiny(args.model, Path(tmp))
        sealer = Sealer.from_home(omni_home())  # the server's key: it serves from this home
        proc, base = start_omni(model_path, Path(tmp) / "omni.db", "--temp", "0")
        rows = []
        try:
            with httpx.Client(base_url=base, timeout=600) as http:
                client = Client(http, model_id)
                for fact in FACTS[: args.facts]:
                    for where in ("user", "tool"):
                        rows.append(trial(client, sealer, fact, where, args))
                        r = rows[-1]
                        print(f"{r['fact']:>10} in {where:<4}  " + "  ".join(
                            f"{c}: {'C' if r[c]['carried'] else '-'}"
                            f"{'A' if r[c]['answered'] else '-'} {r[c]['tokens']:>5} tok"
                            for c in CONDITIONS
                        ), flush=True)  # fmt: skip
        finally:
            proc.terminate()
            proc.wait()
    report(rows, model_id, args)


def report(rows: list[dict[str, Any]], model_id: str, args: argparse.Namespace) -> None:
    summary: dict[str, Any] = {"model": model_id, "filler": args.filler, "trials": rows}
    print(f"\n{model_id}, {args.filler} filler turns; trials where the fact was")
    print(f"{'':<22}" + "".join(f"{c:>12}" for c in CONDITIONS))
    for where in ("user", "tool"):
        mine = [r for r in rows if r["where"] == where]
        for figure in ("carried", "answered"):
            hits = {c: sum(r[c][figure] for r in mine) for c in CONDITIONS}
            summary[f"{where}_{figure}"] = hits
            cells = "".join(f"{hits[c]:>9}/{len(mine):<2}" for c in CONDITIONS)
            print(f"{figure + ' (' + where + ')':<22}{cells}")
    ratio = statistics.median(r["compacted"]["tokens"] / r["full"]["tokens"] for r in rows)
    summary["compacted_to_full_tokens"] = ratio
    print(f"question turn's input tokens, compacted / full: median {ratio:.3f}")
    write_results("compaction", summary)


if __name__ == "__main__":
    main()
