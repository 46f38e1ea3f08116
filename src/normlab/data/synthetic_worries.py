"""The worries among the embedded corpus's story problems (normlab.data.synthetic): a fear, bad weather,
something the hero cannot do yet, something to share. Like the problems in synthetic_problems, each beat
brings the helper in and records in `resolved` the line the ending resolves it with. Written for this
project; no third-party text."""

from __future__ import annotations

from normlab.data.synthetic_parts import capitalize_first
from normlab.data.synthetic_problems import ProblemBeats
from normlab.data.synthetic_words import (
    BOY_NAMES,
    FEARS,
    FEELINGS_SCARED,
    FINALLY,
    GIRL_NAMES,
    INDOOR_FUN,
    SKILLS,
    SUDDENLY,
    WEATHER_BAD,
)


class WorryBeats(ProblemBeats):
    """ProblemBeats with the four worries: every problem a story can draw (`PROBLEMS`)."""

    PROBLEMS = ("p_lost", "p_stuck", "p_broken", "p_taken", "p_fear", "p_weather", "p_cannot", "p_share")

    def p_fear(self) -> None:
        fear, edge, why = self.pick(FEARS)
        self.c["fear"] = fear
        self.para()
        self.say(
            "But {N} had a secret. {He} was afraid of {fear}.",
            "There was just one problem. {N} was scared of {fear}.",
            "But when {he} got to {edge}, {he} stopped.",
            edge=edge,
        )
        self.say(
            "{Why}, and {his} legs began to shake.",
            "{Why}. {N} felt {scared}.",
            "{N} held {his} {o} tight. {Why}.",
            Why=capitalize_first(why.format_map(self.c)),
            scared=self.pick(FEELINGS_SCARED),
        )
        self.opt(
            0.7,
            '"I can\'t do it," {N} whispered.',
            '"I am too scared," said {N}.',
            '"I want to go home," {N} said.',
        )
        self.para()
        self.helper_arrives()
        self.say('"I am scared of {fear}," said {N}.', "{N} told {F} about {fear}.")
        self.say(
            '"Everyone is scared sometimes," said {F}. "I will stay with you."',
            '"Hold my hand," said {F}. "We can do it together."',
            '"Let\'s count to three," said {F}. "One, two, three!"',
            '"Take a deep breath," {F} said gently. "You are braver than you think."',
        )
        self.say(
            "{N} took a deep breath and held {his} {o} close.",
            "{N} held {F}'s hand and took one small step, then another.",
            "{N} closed {his} eyes for a moment, then opened them and went on.",
        )
        self.opt(
            0.7,
            "It was not so bad after all!",
            "Soon {he} was not scared anymore.",
            "{N} did it! {He} felt very {good}.",
        )
        self.say(
            '"I did it!" shouted {N}.', '"That was fun!" {N} laughed.', '"Thank you, {Faddr}," said {N}.'
        )
        self.resolved = "{N} was not afraid of {fear} anymore."

    def p_weather(self) -> None:
        fun = self.pick(INDOOR_FUN)
        wx = self.pick(("rain", "rain", "snow", "storm"))
        self.c.update(WEATHER_BAD[wx])
        self.para()
        self.say(
            "But then dark clouds came, and {start}.",
            "{Sud} the sky turned gray and {start}.",
            "But {start}. It went on and on.",
            Sud=self.pick(SUDDENLY),
        )
        self.opt(
            0.7,
            '"Now I can\'t {V} my {o}," said {N}.',
            '"Oh no, the {wx} will ruin everything," {N} said.',
            "{N} had to run back home with {his} {o}.",
        )
        self.reaction()
        self.para()
        self.helper_arrives()
        self.say(
            '"I wanted to {V} my {o}, but {now}," said {N}.',
            '{N} pointed out of the window. "It is not fair," {he} said.',
        )
        self.say(
            '"We can have fun inside," said {F}.',
            '"I have an idea," said {F}. "Let\'s play inside until the {wx} stops."',
            '"The {wx} will not last forever," {F} said.',
        )
        self.say("So they {fun}.", "{N} and {F} {fun}.", "First they {fun}, and {N} began to smile.", fun=fun)
        self.say(
            "{Fin} the {wx} stopped and the sun came out.",
            "{Fin} the clouds went away. {after}",
            "{Fin} the sky was blue again.",
            Fin=self.pick(FINALLY),
        )
        self.say(
            "{N} ran outside and could {V} {his} {o} {at} after all.",
            '"Now I can {V} my {o}!" cried {N}, and {he} ran to the {P}.',
        )
        self.resolved = "{N} learned that waiting can be fun too."

    def p_cannot(self) -> None:
        skill, ing, fail, tip = self.pick(SKILLS)
        skill = skill.format_map(self.c)
        self.c["skill"] = skill
        self.para()
        self.say(
            "One day, {N} wanted to learn to {skill}.",
            "{N} had a wish. {He} wanted to {skill}, just like the big kids.",
            "More than playing with {his} {o}, {N} wanted to {skill}.",
        )
        self.say("{He} tried, but {he} {fail}.", "{N} tried again and again, but {he} {fail}.", fail=fail)
        if self.maybe(0.5):
            self.say("{He} tried once more. Again {he} {fail}.", fail=fail)
        self.say(
            '"I will never learn to {skill}," said {N}.',
            '"{Ing} is too hard," said {N}.',
            Ing=ing.capitalize(),
        )
        self.reaction()
        self.para()
        self.helper_arrives()
        self.say('"I can\'t {skill}," {N} said.', "{N} told {F} that {he} could not {skill}.")
        self.say(
            '"Here is a trick," said {F}. "{Tip}."',
            '"Let me show you," said {F}. "Just {tip}."',
            '"Everybody falls at first," said {F}. "Try to {tip}."',
            Tip=capitalize_first(tip),
            tip=tip,
        )
        self.opt(
            0.7,
            "{N} listened carefully and tried again.",
            "So {N} practiced every day.",
            "{N} tried one more time, slowly.",
        )
        self.say("This time, {he} did it!", "{Fin} {N} could {skill}!", Fin=self.pick(FINALLY))
        self.opt(0.7, '"Look at me!" shouted {N}. "I can {skill}!"', '"You did it!" said {F}, clapping.')
        self.resolved = "{N} was so proud that {he} showed {his} {o} and {his} new trick to everyone."

    def p_share(self) -> None:
        self.para()
        self.say(
            "{Just} another {kid} came and wanted to play with the {o} too.",
            "{Just} a {kid} named {X} came and grabbed the {o}.",
            Just=self.pick(("Just then,", "Soon,", "But then,")),
            kid=self.pick(("girl", "boy", "child")),
            X=self.pick([n for n in GIRL_NAMES + BOY_NAMES if n not in (self.hero.name, self.helper.name)]),
        )
        self.say(
            '"It is mine!" said {N}. "No, I want it!" said the other {kidd}.',
            'They both pulled the {o}. "Mine!" "No, mine!"',
            kidd="child",
        )
        self.opt(
            0.7,
            "They pulled so hard that they both fell down.",
            "Now they were both {bad}, and nobody was playing.",
            "Both of them started to cry.",
        )
        self.para()
        self.helper_arrives()
        self.say('"We both want the {o}," said {N}.', "{N} told {F} what happened.")
        self.say(
            '"Why don\'t you take turns?" said {F}.',
            '"You can share," said {F}. "It is more fun to play together."',
            '"What if you play with it together?" asked {F}.',
        )
        self.say(
            "So they took turns with the {o}.",
            "{N} let the other child go first.",
            "They played with the {o} together, and it was twice as fun.",
        )
        self.opt(
            0.6,
            "Soon they were laughing and playing like old friends.",
            "By the end of the day, they were best friends.",
        )
        self.resolved = "{N} learned that sharing {his} {o} made {him} even happier."
