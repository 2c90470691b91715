# shellcheck shell=bash
# The speculation workloads' user messages, by name (sourced from the
# project's root by ops/bench/spec.sh and ops/bench/spec_bound.sh):
# summarization (four paper abstracts, summarized), code (rewrite a 40-line
# Python file with docstrings: the output copies the input), chat (a story).
papers="$(cat examples/summarize-papers/papers/0[1-4]*.txt)"
# shellcheck disable=SC2034  # prompts is for the driver that sources this
declare -A prompts=(
  [summarization]="Summarize each of these four papers in two sentences, quoting its key finding.

$papers"
  [code]="Rewrite this Python module, adding a docstring to every function. Keep the code exactly as it is.

$(cat ops/bench/spec/code.txt)"
  [chat]="Write a short story about a lighthouse keeper who finds a message in a bottle."
)
