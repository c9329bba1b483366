# Writes tests/data/sft_chat.jsonl (python3 tests/data/make_sft_chat.py > tests/data/sft_chat.jsonl):
# small chat records with regular answers
# (a tiny byte-level model learns their shape in a few dozen steps).
import json, random, sys
random.seed(19)
countries = [("France", "Paris"), ("Spain", "Madrid"), ("Italy", "Rome"), ("Japan", "Tokyo"), ("Egypt", "Cairo"),
             ("Peru", "Lima"), ("Chile", "Santiago"), ("Kenya", "Nairobi"), ("Norway", "Oslo"), ("Greece", "Athens")]
words = ["apple", "river", "stone", "cloud", "bread", "light", "grass", "honey", "tiger", "music", "paper", "ocean"]
out = []
for i in range(160):
    kind = i % 4
    if kind == 0:
        c, city = random.choice(countries)
        msgs = [{"role": "user", "content": f"What is the capital of {c}?"},
                {"role": "assistant", "content": f"The capital of {c} is {city}."}]
    elif kind == 1:
        a, b = random.randint(1, 9), random.randint(1, 9)
        msgs = [{"role": "user", "content": f"What is {a} plus {b}?"},
                {"role": "assistant", "content": f"{a} plus {b} is {a + b}."}]
    elif kind == 2:
        w = random.choice(words)
        msgs = [{"role": "system", "content": "Answer in one word."},
                {"role": "user", "content": f"Repeat the word {w}."},
                {"role": "assistant", "content": w}]
    else:
        w = random.choice(words)
        c, city = random.choice(countries)
        msgs = [{"role": "user", "content": f"Spell {w} backwards."},
                {"role": "assistant", "content": w[::-1]},
                {"role": "user", "content": f"And the capital of {c}?"},
                {"role": "assistant", "content": f"The capital of {c} is {city}."}]
    out.append(json.dumps({"messages": msgs}))
sys.stdout.write("\n".join(out) + "\n")
