"""docs/mistakes.md is generated from the mutation test's catalogue (kernel_lab.mistakes_page).

The mutation test itself compares each mutant's message with the page (tests/test_mutation_checks.py,
in the simulator); these tests check the page's shape and the quoting rules quickly, anywhere.
"""

from pathlib import Path

import kernel_lab as kl
from kernel_lab import mistakes_page

ROOT = Path(__file__).resolve().parents[1]


def test_a_message_is_quoted_by_its_first_line_and_hints_without_the_seed():
    error = kl.CheckFailed("saxpy (size 1 = 1): 1 of 1 elements are wrong (100%)\nfirst wrong elements ...\n"
                           "  [0]: 1, 2\nHint: round the grid up.\n(inputs drawn with seed=123; pass seed=123 to "
                           "reproduce)")
    assert mistakes_page.summary(error) == ("CheckFailed: saxpy (size 1 = 1): 1 of 1 elements are wrong (100%)\n"
                                            "Hint: round the grid up.")
    plain = kl.CheckFailed("one\ntwo\nthree\nfour\n(inputs drawn with seed=5; pass seed=5 to reproduce)")
    assert mistakes_page.summary(plain) == "CheckFailed: one\ntwo\nthree"


def test_the_page_parses_back_to_what_was_rendered():
    entries = [("saxpy", "00/a.ipynb", "saxpy: bound <= n", "CheckFailed: x\nHint: y"),
               ("saxpy", "00/a.ipynb", "saxpy: no bounds check", "OutOfBoundsAccess: z")]
    page = mistakes_page.render(entries)
    assert mistakes_page.parse(page) == {"saxpy: bound <= n": "CheckFailed: x\nHint: y",
                                         "saxpy: no bounds check": "OutOfBoundsAccess: z"}
    assert page.count("\n## saxpy\n") == 1


def test_the_page_has_an_entry_for_every_mutant():
    tests = mistakes_page.load_mutation_tests(ROOT)
    quoted = mistakes_page.parse((ROOT / mistakes_page.PAGE).read_text())
    ids = [m.id for m in tests.MUTANTS]
    assert set(quoted) == set(ids), (f"docs/mistakes.md and the mutation test's MUTANTS differ (missing: "
                                     f"{sorted(set(ids) - set(quoted))[:5]}, gone: {sorted(set(quoted) - set(ids))[:5]}): "
                                     "run kernel-lab mistakes")


def test_quotes_match_numbers_aside_and_words_exactly():
    quoted = "CheckFailed: two runs gave different results in 20 element(s), the first at [32, 2]."
    assert mistakes_page.matches(quoted, quoted.replace("20", "28").replace("[32, 2]", "[32, 1]"))
    assert not mistakes_page.matches(quoted, quoted.replace("two runs", "three runs"))
    assert not mistakes_page.matches(None, quoted)


def test_regenerating_keeps_a_race_mutants_quote_while_the_check_can_still_say_it():
    quoted = "CheckFailed: race: 12 elements differ"
    rare = "CheckFailed: 69 of 1023 elements are wrong"
    runs = iter([rare, "CheckFailed: race: 40 elements differ"])
    assert mistakes_page.stable_summary(quoted, rare, lambda: next(runs)) == quoted  # said again on a retry
    assert mistakes_page.stable_summary(quoted, "CheckFailed: race: 3 elements differ", lambda: rare) == quoted
    gone = "CheckFailed: a new message"  # the check's wording changed for good: the page follows
    assert mistakes_page.stable_summary(quoted, gone, lambda: gone) == gone
    assert mistakes_page.stable_summary(None, gone, lambda: gone) == gone  # a new mutant


def test_named_hints_are_quoted_too():
    # Module 04's and 05's checks write "Hint (name): ..." lines: the page quotes them like "Hint:".
    error = RuntimeError("attention: wrong\n  [0]: 1, 2\n  [1]: 3, 4\n  [2]: 5, 6\nHint (mask_after_max): mask first.")
    assert mistakes_page.summary(error) == "RuntimeError: attention: wrong\nHint (mask_after_max): mask first."


def test_most_mistakes_get_a_message_that_names_a_likely_cause():
    # Issue 38: of the mutants the checks catch, at least 60% get a message naming a likely cause (a hint
    # line), not only "N elements are wrong". The page holds every caught mutant's message.
    named, total = mistakes_page.cause_rate((ROOT / mistakes_page.PAGE).read_text())
    print(f"{named} of {total} messages name a likely cause ({100 * named / total:.1f}%)")
    assert total > 300 and named / total >= 0.60, f"only {named} of {total} messages name a likely cause"
    assert mistakes_page.names_a_cause("CheckFailed: x\nHint: missing bounds check?")
    assert not mistakes_page.names_a_cause("CheckFailed: 3 of 4 elements are wrong\nexpected 1, got 2")
