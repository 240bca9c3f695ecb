import json

from wordcount import count_words

CASES = [("one two three", 3), ("one  two   three", 3), ("one two\n", 2), ("", 0), ("  padded  ", 1)]

passed = 0
for text, expected in CASES:
    got = count_words(text)
    print(f"count_words({text!r}) = {got!r}, expected {expected}")
    passed += got == expected
with open("/logs/verifier/reward.json", "w") as out:
    json.dump({"reward": 1.0 if passed == len(CASES) else 0.0, "cases_passed": passed / len(CASES)}, out)
