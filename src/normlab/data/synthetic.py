"""The embedded corpus: procedurally generated short children's stories, written by normlab itself.

Every word list and sentence template was written for this project; no third-party text is used. The
word lists are in `synthetic_words`, the characters and the sentence writer in `synthetic_parts`, the
problem beats in `synthetic_problems`; this module sets a story's cast and want and ends it.

A story has a hero (a child or an animal, with a name and pronouns that stay fixed), a helper (family,
a friend, a neighbour or an animal), a place with its own features, and a wanted object that recurs.
The plot is want -> problem -> help -> ending, where the ending resolves the problem that was set up
(a lost thing is found, a broken thing is fixed, a fear is faced, ...). Optional sub-episodes (a
journey with an encounter, a failed first try, a snack, a moral), many interchangeable templates and
connectives make the combinatorial space large, so a small model keeps learning for thousands of steps
instead of memorising, while the long-range structure gives it something real to learn.

Generation is deterministic: story ``i`` of a stream depends only on ``(seed, stream, i)``, so the
training and validation splits use disjoint seed streams and a longer request extends a shorter one.
"""

from __future__ import annotations

import random

from normlab.data.synthetic_parts import make_helper, make_hero, with_article
from normlab.data.synthetic_words import (
    ANIMALS,
    CLOSERS,
    CLOSERS_BACK,
    FEELINGS_BAD,
    FEELINGS_GOOD,
    FOODS,
    MORALS,
    OPENERS,
    PLACES,
    SIZES,
    THINGS,
    WEATHER_NICE,
)
from normlab.data.synthetic_worries import WorryBeats

# Bump whenever the output of the generator changes for a given (seed, stream, i): it is part of the
# token cache key, so old caches are rebuilt instead of silently reused.
GENERATOR_VERSION = 2

TRAIN_STREAM = "train"
VAL_STREAM = "validation"


class Story(WorryBeats):
    """Builds one story: the cast, the want, one problem (`synthetic_problems`) and its ending."""

    def __init__(self, r: random.Random) -> None:
        super().__init__(r)
        self.hero = make_hero(r)
        self.helper = make_helper(r, self.hero)
        self.place = r.choice(PLACES)
        self.thing = r.choice(THINGS)
        adj = r.choice(self.thing.adjs)
        self.obj = f"{adj} {self.thing.noun}"
        h, f = self.hero, self.helper
        self.c = {
            "N": h.name,
            "kind": h.noun,
            "F": f.name,
            "Faddr": f.address,
            "Fnoun": f.noun,
            "O": self.obj,
            "aO": with_article(self.obj),
            "o": self.thing.noun,
            "V": self.thing.verb,
            "P": self.place.noun,
            "at": f"{self.place.prep} the {self.place.noun}",
            "feat": r.choice(self.place.features),
            "good": r.choice(FEELINGS_GOOD),
            "bad": r.choice(FEELINGS_BAD),
        }
        self.c.update(h.pron())
        self.c.update(f.pron("f"))

    def intro(self) -> None:
        h = self.hero
        opener = self.pick(OPENERS)
        # only outdoor places are "near" a home; an attic or a kitchen is inside one
        near = f" near the {self.place.noun}" if self.place.outdoor else ""
        if h.animal is not None:
            home = h.animal.home
            self.say(
                f"{opener} there was {h.intro} who lived in {with_article(home)}.",
                f"{opener} {h.intro} lived in {with_article(home)}{near}.",
                f"There once was {h.intro}. {{He}} lived in {with_article(home)}.",
                f"{opener} {h.intro} woke up in {{his}} {home}.",
            )
        else:
            home = self.pick(
                (
                    "small house",
                    "little cottage",
                    "tall house",
                    "blue house",
                    "farmhouse",
                    "flat above a bakery",
                    "house with a red door",
                    "cozy home",
                )
            )
            self.say(
                f"{opener} there was {h.intro}.",
                f"{opener} there was {h.intro} who lived in {with_article(home)}{near}.",
                f"There once was {h.intro}. {{He}} lived in {with_article(home)} with {{his}} family.",
                f"{opener} {h.intro} woke up early and looked out of the window.",
            )
        trait = h.trait
        if self.maybe(0.6):
            self.say(
                "{N} was " + with_article(trait) + " {kind} who loved to play.",
                "{He} was very " + trait + " and everyone liked {him}.",
                "Everyone knew that {N} was " + with_article(trait) + " " + h.noun + ".",
                "{N} was " + trait + ", and {he} had many friends.",
            )
        self.say(
            "{N} had {aO}.",
            "{N} had {aO} that {he} loved very much.",
            "{His} favorite thing in the whole world was {his} {O}.",
            "{N} loved to {V} {his} {O}.",
            "More than anything, {N} loved {his} {O}.",
            "{N} had a special toy. It was {aO}." if self.thing.kind == "toy" else "{N} had {aO}.",
        )
        if self.maybe(0.5):
            self.say(
                "Every day, {he} would {V} it.",
                "{He} took it everywhere {he} went.",
                "{He} liked to {V} it every morning.",
                "It was a gift from {his} grandma.",
                "{He} kept it in a safe place next to {his} bed.",
                "{He} thought it was the best {o} in the world.",
            )

    def day(self) -> None:
        if self.place.outdoor and self.maybe(0.6):
            self.paras[-1].append(self.pick(WEATHER_NICE))
        self.say(
            "{N} wanted to go to the {P} with {his} {o}.",
            "{N} decided to take {his} {o} to the {P}.",
            '"Today I will {V} my {o} {at}!" said {N}.',
            "{He} wanted to {V} {his} {O} {at}.",
            "That day, {N} went to the {P} to {V} {his} {o}.",
            '"Can I go to the {P}?" {N} asked. "Yes, but be careful," came the answer.',
        )

    def journey(self) -> None:
        """Optional sub-episode: on the way, the hero meets an animal."""
        a = self.pick(ANIMALS)
        if self.hero.animal is not None and a.noun == self.hero.animal.noun:
            return
        self.para()
        self.say(
            "On the way, {N} met {aA}.",
            "As {he} walked along the path, {he} saw {aA}.",
            "On the way to the {P}, {N} saw {aA} sitting by the road.",
            aA=with_article(self.pick(SIZES) + " " + a.noun),
        )
        self.say(
            '"Hello, {A}!" said {N}. "Where are you going?"',
            '"Good morning!" {N} called to the {A}.',
            '"Hi there," said {N}. "Do you want to come with me?"',
            A=a.noun,
        )
        self.say(
            "The {A} {sound} and {move} away.",
            'The {A} {sound}. "I am going home," it said, and {move} off.',
            "The {A} {sound} happily and followed {N} for a while.",
            "The {A} just {sound}, and {N} laughed.",
            A=a.noun,
            sound=a.sound,
            move=a.move,
        )

    def ending(self) -> None:
        self.para()
        self.say(self.resolved)
        if self.maybe(0.45):
            self.say(
                "Then they went home and ate {food}.",
                "Later, they sat together and shared {food}.",
                "To celebrate, {F} made {food} for everyone.",
                "That evening, they had {food} for dinner.",
                food=self.pick(FOODS),
            )
        if self.maybe(0.35):
            self.say(
                "That day, {N} learned that {moral}.",
                "{N} knew now that {moral}.",
                '"Remember," said {F}, "{moral}."',
                moral=self.pick(MORALS[self.problem]),
            )
        extra = CLOSERS_BACK if self.problem in ("p_lost", "p_stuck", "p_taken") else ()
        self.say(*CLOSERS, *extra, "{N} felt {good} and thankful.", "{N} and {F} were {good}.")

    def build(self) -> str:
        self.intro()
        if self.maybe(0.8):
            self.day()
        if self.maybe(0.35):
            self.journey()
        problems = (
            self.PROBLEMS if self.place.outdoor else tuple(p for p in self.PROBLEMS if p != "p_weather")
        )
        self.problem = self.pick(problems)
        getattr(self, self.problem)()
        self.ending()
        return self.text()


def generate_story(seed: int, index: int, stream: str = TRAIN_STREAM) -> str:
    """Story number `index` of the given seed and stream; depends on nothing else."""
    return Story(random.Random(f"normlab-synthetic:{GENERATOR_VERSION}:{seed}:{stream}:{index}")).build()


def generate_stories(n: int, seed: int, *, stream: str = TRAIN_STREAM, start: int = 0) -> list[str]:
    """`n` stories (numbers `start` .. `start + n - 1`) of the given seed and stream.

    The training split uses ``stream="train"`` and the validation split ``stream="validation"``, so
    the two come from disjoint seed streams.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [generate_story(seed, i, stream) for i in range(start, start + n)]
