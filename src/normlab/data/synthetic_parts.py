"""The pieces the embedded corpus's stories (normlab.data.synthetic) are written with: articles and
capitals, the characters (hero and helper, with fixed pronouns), and the sentence writer every beat uses."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from normlab.data.synthetic_words import (
    ANIMALS,
    BOY_NAMES,
    FAMILY,
    GIRL_NAMES,
    HERO_ANIMALS,
    JOBS,
    PET_NAMES,
    PRONOUNS,
    SIZES,
    SURNAMES,
    TRAITS,
    Animal,
)


def with_article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


_FIRST_LETTER = re.compile(r"[a-z]")


def capitalize_first(s: str) -> str:
    m = _FIRST_LETTER.search(s)
    if m is None or any(ch.isalpha() for ch in s[: m.start()]):
        return s
    i = m.start()
    return s[:i] + s[i].upper() + s[i + 1 :]


@dataclass
class Character:
    name: str  # how the narration refers to it after the introduction ("Lily", "her mom")
    intro: str  # first mention ("a little girl named Lily")
    noun: str  # "girl", "rabbit", "mom"
    sex: str  # "f" / "m"
    address: str  # how others call it in dialogue
    animal: Animal | None = None
    tall: bool = False
    trait: str = "kind"  # the hero's one character trait, used wherever the story describes it

    def pron(self, prefix: str = "") -> dict[str, str]:
        p = PRONOUNS[self.sex]
        out = {prefix + k: v for k, v in p.items()}
        out.update({(prefix + k).capitalize(): v.capitalize() for k, v in p.items()})
        return out


def make_hero(r: random.Random) -> Character:
    sex = r.choice("fm")
    if r.random() < 0.5:
        name = r.choice(GIRL_NAMES if sex == "f" else BOY_NAMES)
        noun = "girl" if sex == "f" else "boy"
        trait = r.choice(TRAITS)
        adj = r.choice(("little ", "little ", "young ", "small ", "", trait + " "))
        intro = (
            f"{with_article(adj + noun)} named {name}"
            if r.random() < 0.8
            else f"{with_article(adj + noun)} called {name}"
        )
        return Character(name, intro, noun, sex, name, trait=trait)
    animal = r.choice(HERO_ANIMALS)
    name = r.choice(PET_NAMES)
    trait = r.choice(TRAITS)
    adj = r.choice((*SIZES, trait))
    intro = f"{with_article(adj + ' ' + animal.noun)} named {name}"
    return Character(name, intro, animal.noun, sex, name, animal=animal, trait=trait)


def make_helper(r: random.Random, hero: Character) -> Character:
    his = PRONOUNS[hero.sex]["his"]
    roll = r.random()
    if roll < 0.3:
        noun, sex, address = r.choice(FAMILY)
        if hero.animal is not None and r.random() < 0.5:
            address = {"mom": "Mama", "dad": "Papa"}.get(noun, address)
        return Character(f"{his} {noun}", f"{his} {noun}", noun, sex, address, tall=True)
    if roll < 0.55:
        sex = r.choice("fm")
        name = r.choice(GIRL_NAMES if sex == "f" else BOY_NAMES)
        while name == hero.name:
            name = r.choice(GIRL_NAMES if sex == "f" else BOY_NAMES)
        noun = "girl" if sex == "f" else "boy"
        return Character(name, f"{his} friend {name}", noun, sex, name)
    if roll < 0.8:
        animal = r.choice(ANIMALS)
        sex = r.choice("fm")
        name = r.choice(PET_NAMES)
        while name == hero.name:
            name = r.choice(PET_NAMES)
        adj = r.choice(("wise old", "kind", "friendly", "clever", "big", "gentle", "cheerful", "little"))
        return Character(
            name,
            f"{with_article(adj + ' ' + animal.noun)} named {name}",
            animal.noun,
            sex,
            name,
            animal=animal,
            tall=animal.noun in ("giraffe", "elephant", "horse", "bear", "kangaroo", "dragon", "dinosaur"),
        )
    job, sex = r.choice(JOBS)
    title = "Mrs." if sex == "f" else "Mr."
    name = f"{title} {r.choice(SURNAMES)}"
    return Character(name, f"{name} the {job}", job, sex, name, tall=True)


class Writer:
    """Writes one story's sentences: `c` holds the names and pronouns every template may use, `paras` the
    paragraphs so far; every choice comes from the story's own random stream `r`."""

    def __init__(self, r: random.Random) -> None:
        self.r = r
        self.paras: list[list[str]] = [[]]
        self.c: dict[str, str] = {}

    def pick(self, options: Any) -> Any:
        return self.r.choice(options)

    def opt(self, p: float, *templates: str, **extra: str) -> None:
        """Like `say`, but only with probability `p` (the story gets shorter or longer)."""
        if self.r.random() < p:
            self.say(*templates, **extra)

    def say(self, *templates: str, **extra: str) -> None:
        """Append one sentence chosen from `templates`, formatted with the story context."""
        t = self.r.choice(templates)
        ctx = self.c if not extra else {**self.c, **extra}
        self.paras[-1].append(capitalize_first(t.format_map(ctx)))

    def maybe(self, p: float) -> bool:
        return self.r.random() < p

    def para(self) -> None:
        if self.paras[-1]:
            self.paras.append([])

    def text(self) -> str:
        return "\n\n".join(" ".join(p) for p in self.paras if p)
