"""Word lists and sentence parts of the embedded corpus (normlab.data.synthetic), written for this project.

They are data, kept as data: `synthetic_words.json` beside this module, shipped with the package. This
module reads it once at import and gives the tables their types (records as frozen dataclasses, the
rest as tuples), so the story generator reads names, not dictionary keys. No third-party text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

WORDS_FILE = "synthetic_words.json"


@dataclass(frozen=True)
class Animal:
    noun: str
    home: str  # where it lives, after "a" / "an"
    sound: str  # past tense of the noise it makes
    move: str  # past tense of how it usually moves
    can_fly: bool = False
    hero: bool = True  # cute enough to be the hero


@dataclass(frozen=True)
class Place:
    noun: str  # "park"
    prep: str  # "in" / "at" / "on"
    features: tuple[str, ...]  # things found there (nouns, used after "the")
    activity: tuple[str, ...]  # what one does there, "-ing" phrases
    outdoor: bool = True


@dataclass(frozen=True)
class Thing:
    noun: str
    verb: str  # what one does with it: "play with", "fly", "read"
    adjs: tuple[str, ...]  # adjectives that suit it
    kind: str  # toy / wear / treasure / ride
    soft: bool = False  # cloth or paper: mended with a needle or tape, not glue or a screwdriver


def _frozen(value: Any) -> Any:
    """JSON arrays as tuples, all the way down (dictionaries stay dictionaries)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


def _load() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath(WORDS_FILE).read_text(encoding="utf-8"))


_WORDS = _load()


def _table(name: str) -> Any:
    return _frozen(_WORDS[name])


# names: lists, as the generator has always drawn them
GIRL_NAMES = list(_WORDS["girl_names"])
BOY_NAMES = list(_WORDS["boy_names"])
PET_NAMES = list(_WORDS["pet_names"])
SURNAMES = list(_WORDS["surnames"])

ANIMALS = tuple(Animal(**a) for a in _WORDS["animals"])
HERO_ANIMALS = tuple(a for a in ANIMALS if a.hero)
# animals that might snatch something and run off with it
CHEEKY_ANIMALS = tuple(a for a in ANIMALS if a.noun in set(_WORDS["cheeky_animals"]))
PLACES = tuple(Place(**p) for p in _table("places"))
THINGS = tuple(Thing(**t) for t in _table("things"))

FEELINGS_BAD = _table("feelings_bad")
FEELINGS_GOOD = _table("feelings_good")
FEELINGS_SCARED = _table("feelings_scared")
TRAITS = _table("traits")
SIZES = _table("sizes")
FOODS = _table("foods")
WEATHER_NICE = _table("weather_nice")
OPENERS = _table("openers")
SUDDENLY = _table("suddenly")
FINALLY = _table("finally")
SAID = _table("said")
SMALL_SPOTS = _table("small_spots")
WEATHER_BAD = _table("weather_bad")  # weather that spoils a plan, with the phrases that must agree with it
SOFT_FIX = _table("soft_fix")  # tools for mending soft things (cloth, paper) ...
FIX_TOOLS = _table("fix_tools")  # ... and hard things
INDOOR_FUN = _table("indoor_fun")
SKILLS = _table("skills")
FEARS = _table("fears")
STUCK_SPOTS = _table("stuck_spots")
MORALS = _table("morals")  # lessons that fit each kind of problem (the key is the method that tells it)
CLOSERS = _table("closers")
CLOSERS_BACK = _table("closers_back")  # closing lines that only fit some problems

PRONOUNS = _table("pronouns")
FAMILY = _table("family")
JOBS = _table("jobs")
