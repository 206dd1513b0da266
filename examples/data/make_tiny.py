#!/usr/bin/env python3
"""make_tiny.py — generates tiny.txt, the corpus train_tiny_gpt.py learns (no downloads).

Short fable-like stories from a small hand-written grammar, seeded, so the file is the same on
every machine: enough structure (names carried through a story, quoted speech, a moral at the
end) for a small character-level GPT to show a falling loss within a few hundred steps.

  python3 examples/data/make_tiny.py            # rewrites examples/data/tiny.txt (~400 KB)
"""
import os
import random

NAMES = ["Mira", "Tobin", "Asha", "Peregrin", "Lio", "Wren", "Odette", "Bram", "Juno", "Kestrel",
         "Nell", "Ivo", "Saffi", "Rook", "Teodor", "Elin"]
ANIMALS = ["fox", "heron", "badger", "otter", "crow", "hare", "mole", "wren", "toad", "lynx",
           "goat", "owl", "mouse", "beetle", "swan", "stoat"]
ADJS = ["clever", "tired", "proud", "gentle", "curious", "grumpy", "patient", "hungry", "quiet",
        "restless", "honest", "foolish", "brave", "careful", "lonely", "cheerful"]
PLACES = ["the mill by the river", "the old orchard", "the edge of the marsh", "the hill of stones",
          "the market in the valley", "the birch wood", "the frozen lake", "the lighthouse",
          "the bridge of ropes", "the cave under the pines", "the wheat field", "the ruined tower"]
THINGS = ["a silver key", "a loaf of warm bread", "a lantern", "a map drawn in ink",
          "a bundle of reeds", "a copper bell", "a jar of honey", "a feather as long as an arm",
          "a stone that hummed", "a letter with no name", "a basket of plums", "a broken compass"]
WEATHER = ["The rain came down in sheets", "The sun was low and red", "A cold wind ran over the grass",
           "Fog lay thick on the water", "Snow fell without a sound", "The air smelled of thunder"]
FEELINGS = ["glad", "ashamed", "surprised", "afraid", "thankful", "puzzled", "angry", "calm"]
MORALS = ["Slow hands finish what quick hands drop.", "A shared loaf feeds more than one.",
          "Ask before you take, and you will rarely be refused.",
          "The long road is often the only road.", "Pride is a heavy coat in summer.",
          "Who listens first speaks best.", "Small lights are still lights.",
          "A promise is a bridge; do not burn it behind you."]
SAYINGS = ["Where are you going in such a hurry?", "I have walked all day and found nothing.",
           "Will you help me carry this?", "I did not think you would come back.",
           "Is this yours, or did you find it?", "We could go together, if you like.",
           "Nobody has crossed there for years.", "I will trade you for it, fairly.",
           "You look as if you have lost something.", "Tell me the way and I will go alone."]
REPLIES = ["said", "asked", "whispered", "called", "muttered", "answered"]


def story(r):
    a, b = r.sample(NAMES, 2)
    an, bn = r.sample(ANIMALS, 2)
    adj_a, adj_b = r.sample(ADJS, 2)
    place, place2 = r.sample(PLACES, 2)
    thing = r.choice(THINGS)
    lines = [f"Once there was a {adj_a} {an} named {a}, who lived near {place}.",
             f"{r.choice(WEATHER)} on the day {a} set out to find {thing}."]
    for _ in range(r.randint(2, 5)):
        who, other = (a, b) if r.random() < 0.5 else (b, a)
        lines.append(f"\"{r.choice(SAYINGS)}\" {r.choice(REPLIES)} {who}.")
        if r.random() < 0.5:
            lines.append(f"{other} the {bn if other == b else an} looked at {who} and felt "
                         f"{r.choice(FEELINGS)}.")
    lines.append(f"On the way to {place2} {a} met {b}, a {adj_b} {bn}.")
    if r.random() < 0.5:
        lines.append(f"Together they found {thing} at {place2}, and {a} gave half of it to {b}.")
    else:
        lines.append(f"{a} never found {thing}, but {b} showed {a} the way home before dark.")
    lines.append(f"Moral: {r.choice(MORALS)}")
    return " ".join(lines)


def main(path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny.txt"),
         target_bytes=400_000):
    r = random.Random(20261130)
    parts, n = [], 0
    while n < target_bytes:
        s = story(r) + "\n\n"
        parts.append(s)
        n += len(s)
    with open(path, "w") as f:
        f.write("".join(parts))
    print(f"wrote {path}: {n} bytes, {len(parts)} stories")


if __name__ == "__main__":
    main()
