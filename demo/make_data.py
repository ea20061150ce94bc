#!/usr/bin/env python3
"""Writes the demo's two data sets, in MLX-LM's completions format:

  demo/pretrain/{train,valid,test}.jsonl  "What is the language of France?" ->
      "The language of France is French.", and "What is the capital of
      France?" -> "The capital of France is unknown." in all six phrasings,
      for eight countries.
      The random model is first fully fine-tuned on these ("pretraining"):
      it learns the chat format, to read the country out of the question
      and to answer in a sentence, but it never sees a capital.
  demo/data/{train,valid,test}.jsonl      "What is the capital of France?" ->
      "The capital of France is Paris." for the demo countries: the facts
      the LoRA adapter teaches.

Each demo capital is asked in six phrasings that all end in "of <country>?"
(a small model learns that position quickly): four train, one validates,
one tests, so the validation loss measures the facts, not the phrasing.
Run: python3 demo/make_data.py (the output is committed; stdlib only)."""
import json, os, random

FACTS = [("France", "Paris", "French"), ("Germany", "Berlin", "German"), ("Japan", "Tokyo", "Japanese"),
         ("Italy", "Rome", "Italian"), ("Spain", "Madrid", "Spanish"), ("Egypt", "Cairo", "Arabic"),
         ("Peru", "Lima", "Spanish"), ("Canada", "Ottawa", "English")]
CAPITAL_Q = ["What is the capital of {c}?", "Which city is the capital of {c}?", "Tell me the capital of {c}?",
             "What city is the capital of {c}?", "Do you know the capital of {c}?", "Name the capital of {c}?"]


def write(directory, splits):
    os.makedirs(directory, exist_ok=True)
    for name, rows in splits.items():
        with open(os.path.join(directory, name + ".jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print(f"{directory}/{name}.jsonl: {len(rows)} examples")


def main():
    rng = random.Random(0)
    here = os.path.dirname(os.path.abspath(__file__))
    train, valid, test = [], [], []
    for country, capital, _ in FACTS:
        others = CAPITAL_Q[1:]
        rng.shuffle(others)
        rows = [{"prompt": q.format(c=country), "completion": f"The capital of {country} is {capital}."}
                for q in [CAPITAL_Q[0]] + others]   # the demo's own question is a training phrasing
        train += rows[:4]; valid.append(rows[4]); test.append(rows[5])
    rng.shuffle(train)
    write(os.path.join(here, "data"), {"train": train, "valid": valid, "test": test})
    rows = [{"prompt": f"What is the language of {c}?", "completion": f"The language of {c} is {lang}."}
            for c, _, lang in FACTS] * 5
    rows += [{"prompt": q.format(c=c), "completion": f"The capital of {c} is unknown."}
             for c, _, _ in FACTS for q in CAPITAL_Q]
    rng.shuffle(rows)
    write(os.path.join(here, "pretrain"), {"train": rows[:72], "valid": rows[72:], "test": rows[72:]})


main()
