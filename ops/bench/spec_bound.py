"""How far prompt-lookup (n-gram) drafting can go on one workload, by replay.

  spec_bound.py PROMPT_IDS OUTPUT_IDS COSTS_JSON

PROMPT_IDS and OUTPUT_IDS hold the token ids of the chat-formatted prompt and
of the target model's greedy output (whitespace-separated); COSTS_JSON maps a
step's token count (1..9) to its measured ms. The replay walks the output as
decoding would: at each position the drafter's rule (most recent earlier
occurrence of the last n tokens, n from N_MAX down to N_MIN, copying up to 8
tokens that followed; engine/speculation/ngram_drafter.cpp) proposes a window,
and the greedy output says how many of its tokens would be accepted. Policies:
  oracle  drafts exactly the tokens that will be accepted (no window is ever
          wasted): an upper bound for any controller using this drafter;
  all8    drafts everything proposed, up to 8;
  all4    drafts up to 4.
Each step costs COSTS[1 + drafted]; the speed-up is against one token a step.
With free verification (every step costing the same) the oracle's speed-up is
simply output tokens / steps. One JSON line per (N_MIN, N_MAX).
"""
import json
import sys


def propose(history, k, n_max, n_min):
    length = len(history)
    for n in range(min(n_max, length - 1), n_min - 1, -1):
        tail = history[length - n:]
        for start in range(length - n - 1, -1, -1):
            if history[start:start + n] == tail:
                follow, out = start + n, []
                for i in range(k):
                    at = follow + i
                    out.append(history[at] if at < length else out[at - length])
                return out
    return []


def replay(prompt, output, cost, policy, n_max, n_min):
    ms = lambda tokens: cost[str(min(tokens, max(int(t) for t in cost)))]
    i = steps = 0
    total = 0.0
    while i < len(output):
        draft = propose(prompt + output[:i], 8, n_max, n_min)
        accepted = 0
        while accepted < len(draft) and i + accepted < len(output) and draft[accepted] == output[i + accepted]:
            accepted += 1
        k = {"oracle": accepted, "all8": len(draft), "all4": min(4, len(draft))}[policy]
        accepted = min(accepted, k)
        total += ms(1 + k)
        i += accepted + 1
        steps += 1
    return len(output) * ms(1) / total, steps


def main():
    prompt, output = ([int(t) for t in open(p).read().split()] for p in sys.argv[1:3])
    cost = json.loads(open(sys.argv[3]).read())
    for n_min, n_max in ((2, 4), (2, 8), (3, 8)):
        row = {"n_min": n_min, "n_max": n_max, "output_tokens": len(output)}
        for policy in ("oracle", "all8", "all4"):
            speedup, steps = replay(prompt, output, cost, policy, n_max, n_min)
            row[f"{policy}_speedup"] = round(speedup, 2)
            if policy == "oracle":
                row["oracle_steps"] = steps
                row["oracle_speedup_free_verify"] = round(len(output) / steps, 2)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
