#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/speculation/suffix_tree.h"

using troupe::SuffixDraft;
using troupe::SuffixTree;
using Seq = std::vector<int32_t>;

namespace {

// The reference: counts by scanning every stored sequence, no tree.
// count(path): the suffix windows (start j, at most `depth` long) that begin with path.
struct BruteForce {
  std::vector<Seq> seqs;
  int32_t depth;
  int64_t count(const Seq& path) const {
    if (static_cast<int32_t>(path.size()) > depth) return 0;
    int64_t n = 0;
    for (const auto& s : seqs)
      for (size_t j = 0; j + path.size() <= s.size(); ++j)
        if (std::equal(path.begin(), path.end(), s.begin() + static_cast<std::ptrdiff_t>(j))) ++n;
    return n;
  }
  std::map<int32_t, int64_t> continuations(const Seq& path) const {
    std::map<int32_t, int64_t> out;
    if (static_cast<int32_t>(path.size()) >= depth) return out;
    for (const auto& s : seqs)
      for (size_t j = 0; j + path.size() < s.size(); ++j)
        if (std::equal(path.begin(), path.end(), s.begin() + static_cast<std::ptrdiff_t>(j))) ++out[s[j + path.size()]];
    return out;
  }
};

Seq random_seq(std::mt19937& rng, size_t len, int32_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  Seq s(len);
  for (auto& t : s) t = token(rng);
  return s;
}

// Every draft step is a most frequent continuation, with the reference's probability.
void check_against_reference(const SuffixTree& tree, const BruteForce& ref, const Seq& tail, int32_t k) {
  const SuffixDraft d = tree.propose(tail, k, 0.0, 100.0);
  // The match: the longest stretch of the tail that has a continuation and
  // leaves room for k drafted tokens under depth (at most half of it).
  int32_t want_match = 0;
  for (int32_t m = std::min<int32_t>(static_cast<int32_t>(tail.size()), ref.depth - std::min(k, ref.depth / 2)); m >= 1; --m)
    if (!ref.continuations(Seq(tail.end() - m, tail.end())).empty()) {
      want_match = m;
      break;
    }
  REQUIRE(d.match == want_match);
  Seq path(tail.end() - d.match, tail.end());
  double probability = 1.0, score = 0;
  for (const int32_t t : d.tokens) {
    const auto next = ref.continuations(path);
    REQUIRE(next.count(t) == 1);
    int64_t top = 0;
    for (const auto& [tok, n] : next) top = std::max(top, n);
    CHECK(next.at(t) == top);
    probability *= static_cast<double>(next.at(t)) / static_cast<double>(ref.count(path));
    score += probability;
    path.push_back(t);
  }
  CHECK(d.score == Approx(score));
  // It stopped because the path ran out (or k, or depth), not early.
  if (static_cast<int32_t>(d.tokens.size()) < k && d.match > 0 && static_cast<int32_t>(path.size()) < ref.depth)
    CHECK(ref.continuations(path).empty());
}

}  // namespace

TEST_CASE("a suffix tree drafts what followed the longest matching stretch of history") {
  SuffixTree tree(8);
  tree.add(Seq{1, 2, 3, 4, 5, 6});
  tree.add(Seq{9, 9, 3, 4, 7});
  const SuffixDraft d = tree.propose(Seq{8, 2, 3, 4}, 4, 0.0);
  CHECK(d.match == 3);  // 2 3 4 appears once, followed by 5 6
  CHECK(d.tokens == Seq{5, 6});
  CHECK(d.score == Approx(2.0));
  // Only "3 4" matches: two continuations, one each: the probability halves.
  const SuffixDraft e = tree.propose(Seq{0, 3, 4}, 4, 0.0);
  CHECK(e.match == 2);
  REQUIRE(e.tokens.size() >= 1);
  CHECK((e.tokens[0] == 5 || e.tokens[0] == 7));
  CHECK(e.score == Approx(0.5 + (e.tokens[0] == 5 ? 0.5 : 0.0)));
  CHECK(tree.propose(Seq{42}, 4).tokens.empty());
}

TEST_CASE("a suffix tree drafts in full where the tail copies a long stretch of history") {
  // Output copying its prompt matches every stretch of the tail: the match
  // is cut to leave room for the draft under the tree's depth.
  SuffixTree tree(24);
  Seq text(60);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<int32_t>(100 + i);
  tree.add(text);
  const Seq tail(text.begin(), text.begin() + 40);
  const SuffixDraft d = tree.propose(tail, 8);
  CHECK(d.match == 16);
  CHECK(d.tokens == Seq(text.begin() + 40, text.begin() + 48));
}

TEST_CASE("a suffix tree follows the most frequent continuation and stops where agreement ends") {
  SuffixTree tree(16);
  for (int i = 0; i < 3; ++i) tree.add(Seq{10, 11, 12, 13, 14});
  tree.add(Seq{10, 11, 20});
  const SuffixDraft d = tree.propose(Seq{10, 11}, 8, 0.5);
  CHECK(d.tokens == Seq{12, 13, 14});  // 3 of 4 went on to 12, all of those to 13 and 14
  CHECK(d.score == Approx(0.75 * 3));
  // A floor above 0.75 drafts nothing.
  CHECK(tree.propose(Seq{10, 11}, 8, 0.8).tokens.empty());
  // Short matches are weak evidence: at most per_match × match tokens.
  CHECK(tree.propose(Seq{11}, 8, 0.0, 2.0).tokens.size() == 2);
}

TEST_CASE("a suffix tree's drafts equal a brute-force count over random histories") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t depth = 3 + trial % 6, vocab = 3 + trial % 4;
    SuffixTree tree(depth);
    BruteForce ref{{}, depth};
    for (int s = 0; s < 6; ++s) {
      ref.seqs.push_back(random_seq(rng, 5 + rng() % 30, vocab));
      tree.add(ref.seqs.back());
    }
    for (int q = 0; q < 20; ++q) check_against_reference(tree, ref, random_seq(rng, 1 + rng() % 10, vocab), 1 + q % 9);
  }
}

TEST_CASE("a suffix tree's open sequence counts token by token as a whole one does") {
  std::mt19937 rng(11);
  const Seq a = random_seq(rng, 40, 5), b = random_seq(rng, 30, 5);
  SuffixTree whole(6), streamed(6);
  whole.add(a);
  whole.add(b);
  streamed.add(a);
  streamed.begin();
  for (const int32_t t : b) streamed.append(t);
  CHECK(whole.nodes() == streamed.nodes());
  CHECK(whole.serialize() == streamed.serialize());
  for (int q = 0; q < 50; ++q) {
    const Seq tail = random_seq(rng, 1 + q % 6, 5);
    CHECK(whole.propose(tail, 6, 0.0).tokens == streamed.propose(tail, 6, 0.0).tokens);
  }
}

TEST_CASE("a suffix tree over its token budget drops its oldest sequences and their nodes") {
  std::mt19937 rng(3);
  SuffixTree tree(8, 100);
  const Seq first = random_seq(rng, 60, 50), second = random_seq(rng, 60, 50);
  tree.add(first);
  tree.add(second);  // 120 > 100: the first goes
  CHECK(tree.tokens() == 60);
  CHECK(tree.sequences() == 1);
  // What is left is what a tree that only ever saw the second holds.
  SuffixTree fresh(8, 100);
  fresh.add(second);
  CHECK(tree.nodes() == fresh.nodes());
  CHECK(tree.serialize() == fresh.serialize());
  // The evicted history no longer drafts.
  CHECK(tree.propose(Seq(first.begin(), first.begin() + 5), 4, 0.0).match < 5);
  // Bounded: many sequences later, the tree holds at most the budget.
  for (int i = 0; i < 200; ++i) tree.add(random_seq(rng, 30, 50));
  CHECK(tree.tokens() <= 100);
  CHECK(tree.nodes() <= 100 * 8);
  CHECK(tree.bytes() < 64 * 1024);
}

TEST_CASE("a suffix tree survives a serialization round trip and refuses a damaged record") {
  std::mt19937 rng(5);
  SuffixTree tree(10);
  for (int i = 0; i < 5; ++i) tree.add(random_seq(rng, 50, 20));
  const std::string bytes = tree.serialize();
  const SuffixTree back = SuffixTree::parse(bytes);
  CHECK(back.nodes() == tree.nodes());
  CHECK(back.tokens() == tree.tokens());
  CHECK(back.serialize() == bytes);
  for (int q = 0; q < 50; ++q) {
    const Seq tail = random_seq(rng, 1 + q % 8, 20);
    CHECK(back.propose(tail, 8, 0.0).tokens == tree.propose(tail, 8, 0.0).tokens);
  }
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  CHECK_THROWS_WITH(SuffixTree::parse(flipped), Catch::Contains("checksum"));
  CHECK_THROWS_WITH(SuffixTree::parse(bytes.substr(0, bytes.size() - 3)), Catch::Contains("damaged") || Catch::Contains("truncated"));
  CHECK_THROWS_WITH(SuffixTree::parse("junk"), Catch::Contains("not a suffix tree"));
}

TEST_CASE("a request's own suffix tree does not count its open tail against what followed before") {
  SuffixTree own(8);
  own.add(Seq{1, 2, 3, 9, 1, 2});  // the request so far: "1 2" again, at its end
  const SuffixDraft open = own.propose(Seq{1, 2}, 8, 0.0, 2.0, true);
  CHECK(open.tokens == Seq{3, 9, 1, 2});  // 2 × the match
  CHECK(open.score == Approx(4.0));       // what followed "1 2" before, every time it did
  CHECK(own.propose(Seq{1, 2}, 8, 0.0, 2.0, false).score == Approx(2.0));  // counted as one of two
}

TEST_CASE("of several suffix trees the draft that promises most is taken, and none that promises little") {
  SuffixTree session(8), server(8);
  session.add(Seq{1, 2, 3, 4, 5});
  server.add(Seq{1, 2, 9});
  server.add(Seq{1, 2, 8});
  const SuffixTree* trees[] = {&server, nullptr, &session};
  const SuffixDraft d = troupe::best_suffix_draft(trees, Seq{1, 2}, 3);
  CHECK(d.tokens == Seq{3, 4, 5});
  // Where the trees only disagree (9 or 8, half each: 0.5 expected), none is offered.
  const SuffixTree* weak[] = {&server};
  CHECK(server.propose(Seq{1, 2}, 3).score == Approx(0.5));
  CHECK(troupe::best_suffix_draft(weak, Seq{1, 2}, 3).tokens.empty());
}

TEST_CASE("a suffix tree record with any byte changed or cut is refused or read whole, never half") {
  std::mt19937 rng(13);
  SuffixTree tree(6);
  for (int i = 0; i < 4; ++i) tree.add(random_seq(rng, 20, 300));
  const std::string bytes = tree.serialize();
  int refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string damaged = bytes;
    if (trial % 3 == 0) {
      damaged.resize(rng() % bytes.size());
    } else {
      for (int flips = 1 + trial % 4; flips > 0; --flips) damaged[rng() % damaged.size()] = static_cast<char>(rng());
    }
    if (damaged == bytes) continue;
    try {
      const SuffixTree back = SuffixTree::parse(damaged);
      CHECK(back.serialize() == damaged);  // read whole: exactly what it says (a checksum collision)
    } catch (const std::runtime_error&) {
      ++refused;
    }
  }
  CHECK(refused > 1900);
}
