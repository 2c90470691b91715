"""The workloads of ops/bench/suffix.sh, built from public text and code:

- job:    the ten documents of examples/summarize-papers/documents (Python
          HOWTOs and library pages, git and dpkg documents from Debian's
          packages; sources and licences in that folder's README), cut into
          sections of whole paragraphs: 50 items of one batch job, five from
          each, each summarized as a JSON record under one schema (a nightly
          job's shape);
- coding: a 40-turn session over one file, CPython's colorsys module (the
          Python Software Foundation License; read from this machine's
          standard library): each turn asks to show, explain, annotate or
          rewrite one of its functions;
- agent:  30 tool calls of a travel-planning loop (two tools, similar
          arguments), the conversation resent whole each time as agent
          frameworks do, each call answered by a made-up tool result;
- chat:   twenty unrelated open questions (history cannot help: the control).
"""
import glob
import inspect
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

SUMMARY_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["title", "problem", "method", "result", "keywords"],
    "properties": {"title": {"type": "string"}, "problem": {"type": "string"}, "method": {"type": "string"},
                   "result": {"type": "string"},
                   "keywords": {"type": "array", "minItems": 3, "maxItems": 5, "items": {"type": "string"}}}}
JOB_TEMPLATE = ("Summarize this section of a technical document for a reading list, as a JSON record with its title, "
                "the problem, the method and the result in one sentence each, and three to five keywords.\n\n{item}")


def document_sections(per_document=5, chars=1600):
    """Each document's first `per_document` runs of whole paragraphs of about `chars` characters."""
    items = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "summarize-papers", "documents", "*.txt"))):
        sections, cur = [], ""
        for para in (p.strip() for p in open(path).read().split("\n\n")):
            if para:
                cur = f"{cur}\n\n{para}" if cur else para
            if len(cur) >= chars:
                sections.append(cur[:2 * chars])
                cur = ""
            if len(sections) == per_document:
                break
        items += sections
    return items


def coding_turns(n=40):
    import colorsys
    source = inspect.getsource(colorsys)
    names = [name for name, f in inspect.getmembers(colorsys, inspect.isfunction)
             if f.__module__ == "colorsys" and not name.startswith("_")]
    asks = ["Show the function {f} exactly as it is in the file.",
            "Explain in two sentences what {f} does.",
            "Show {f} again with type hints on its parameters and return value.",
            "Rewrite {f} with more descriptive local variable names and show the whole function.",
            "Add a docstring to {f} and show the whole function.",
            "Which other function of the file is the inverse of {f}? Show both signatures."]
    turns = [f"Here is a Python file:\n\n```python\n{source}```\n\n" + asks[0].format(f=names[0])]
    i = 1
    while len(turns) < n:
        turns.append(asks[i % len(asks)].format(f=names[(i // len(asks)) % len(names)]))
        i += 1
    return turns


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather forecast for a city on a date.",
        "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "date", "units"],
                       "properties": {"city": {"type": "string"}, "date": {"type": "string", "format": "date"},
                                      "units": {"enum": ["metric", "imperial"]}}}}},
    {"type": "function", "function": {
        "name": "search_flights", "description": "Flights between two cities on a date.",
        "parameters": {"type": "object", "additionalProperties": False,
                       "required": ["origin", "destination", "date", "passengers"],
                       "properties": {"origin": {"type": "string"}, "destination": {"type": "string"},
                                      "date": {"type": "string", "format": "date"},
                                      "passengers": {"type": "integer", "minimum": 1, "maximum": 9}}}}},
]
CITIES = ["Lisbon", "Porto", "Madrid", "Seville", "Lyon", "Milan", "Vienna", "Prague", "Krakow", "Berlin",
          "Hamburg", "Copenhagen", "Oslo", "Stockholm", "Helsinki"]


def agent_tasks(n=30):
    """User messages of the loop: each asks for one call."""
    tasks = []
    for i in range(n):
        city, nxt = CITIES[i % len(CITIES)], CITIES[(i + 1) % len(CITIES)]
        day = f"2027-06-{1 + i % 28:02d}"
        tasks.append(f"Check the weather in {city} on {day} in metric units." if i % 2 == 0 else
                     f"Find flights from {city} to {nxt} on {day} for 2 passengers.")
    return tasks


def tool_result(call):
    """A made-up result for the call (a call cut at max_tokens gets one for no arguments)."""
    try:
        args = json.loads(call["arguments"]) if isinstance(call.get("arguments"), str) else call.get("arguments", {})
    except ValueError:
        args = {}
    if call.get("name") == "get_weather":
        return json.dumps({"city": args.get("city"), "date": args.get("date"), "high_c": 24, "low_c": 15,
                           "sky": "sunny"})
    return json.dumps({"flights": [{"number": "TP 1234", "departs": "08:15", "price_eur": 89},
                                   {"number": "FR 5678", "departs": "17:40", "price_eur": 54}]})


QUESTIONS = ["Why is the sky blue?", "Write a haiku about autumn rain.", "What makes a good API error message?",
             "Explain recursion to a child.", "Give three tips for a job interview.",
             "What is the difference between a list and a tuple in Python?", "Describe a sunrise over the sea.",
             "How do vaccines train the immune system?", "Plan a three-day trip to Kyoto.",
             "What is a hash collision?", "Why do cats purr?", "How does a bicycle stay upright?",
             "Suggest a name for a bakery that sells only bread.", "What causes tides?",
             "Explain the rules of chess castling.", "How should I store fresh basil?",
             "What is the difference between weather and climate?", "Write a limerick about a lost sock.",
             "Why do onions make people cry?", "How does compound interest work?"]
