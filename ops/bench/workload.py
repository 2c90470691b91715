"""The Poisson workload both servers get in ops/bench/serve.sh: for a seed,
the same arrival gaps, prompts (128-1,024 words, about one token each) and
output lengths (64-256 tokens)."""
import random

WORDS = ("the quick brown fox jumps over the lazy dog while the server streams tokens to its many clients "
         "who ask about code data and stories").split()


def text_of(n_tokens, rng):
    return " ".join(rng.choice(WORDS) for _ in range(n_tokens))


def poisson_requests(rate, n, seed):
    """[(gap_before_next_s, prompt, max_tokens)] for n requests."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = text_of(rng.randint(128, 1024), rng)
        gen = rng.randint(64, 256)
        out.append((rng.expovariate(rate), prompt, gen))
    return out


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else 0.0
