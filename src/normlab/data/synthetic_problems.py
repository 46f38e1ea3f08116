"""The problems of the embedded corpus's stories (normlab.data.synthetic): each `p_*` beat sets one up
(a lost thing, a stuck one, a broken one, ...), brings the helper in and records in `resolved` the line
the ending resolves it with. Written for this project; no third-party text."""

from __future__ import annotations

from normlab.data.synthetic_parts import Character, Writer, with_article
from normlab.data.synthetic_words import (
    CHEEKY_ANIMALS,
    FINALLY,
    FIX_TOOLS,
    FOODS,
    SAID,
    SMALL_SPOTS,
    SOFT_FIX,
    STUCK_SPOTS,
    SUDDENLY,
    Place,
    Thing,
)


class ProblemBeats(Writer):
    """The beats between the want and the ending; the story (normlab.data.synthetic.Story) sets the cast.
    The problems with a thing are here; the worries (fear, weather, a skill, sharing) in WorryBeats."""

    hero: Character
    helper: Character
    place: Place
    thing: Thing
    resolved: str

    def new_feat(self) -> str:
        self.c["feat"] = self.r.choice(self.place.features)
        return self.c["feat"]

    def helper_arrives(self) -> None:
        f = self.helper
        self.say(
            "{Just} {intro} came by.",
            "{Just} {intro} saw {N} and came over.",
            "Then {intro} walked up to {N}.",
            "{Just} {he} heard a voice. It was {intro}.",
            Just=self.pick(("Just then,", "Soon,", "After a while,", "Then")),
            intro=f.intro,
        )
        self.opt(
            0.8,
            '"What is wrong, {N}?" asked {F}.',
            '"Why are you {bad}?" {F} asked.',
            '"Can I help you?" asked {F}.',
            '"{N}, you look {bad}. What happened?" said {F}.',
            '"Oh dear, what is the matter?" asked {F} kindly.',
        )

    def reaction(self) -> None:
        if self.maybe(0.25):
            return
        self.opt(
            0.75,
            "{N} felt very {bad}.",
            "{N} was so {bad} that {he} began to cry.",
            "{N} sat down and felt {bad}.",
            "{His} eyes filled with tears.",
            "{N} did not know what to do.",
        )

    def p_lost(self) -> None:
        self.para()
        self.opt(
            0.8,
            "{N} played with {his} {o} near the {feat} for a long time.",
            "{N} ran and laughed and played near the {feat}.",
            "{N} put {his} {o} down by the {feat} and ran to look at a butterfly.",
        )
        self.say(
            "But when {he} came back, the {o} was gone!",
            "{Sud} {his} {o} was not there anymore.",
            "When {he} turned around, {his} {O} was missing.",
            Sud=self.pick(SUDDENLY),
        )
        self.say('"Where is my {o}?" {N} {said}.', '"Oh no! My {o}!" {N} {said}.', said=self.pick(SAID))
        spots = self.r.sample(SMALL_SPOTS, 2)
        self.opt(
            0.75,
            "{He} looked {s1} and {s2}, but it was not there.",
            "{N} searched {s1}. {He} searched {s2}. The {o} was nowhere.",
            "First {he} looked {s1}. Then {he} looked {s2}. Nothing.",
            s1=spots[0],
            s2=spots[1],
        )
        self.reaction()
        self.para()
        self.helper_arrives()
        self.say(
            '"I lost my {O}," said {N}.',
            '"My {o} is lost," {N} said sadly.',
            '"I can not find my {o}," said {N}.',
        )
        self.say(
            '"Don\'t worry, we will find it together," said {F}.',
            '"Let\'s look for it together," {F} said.',
            '"Where did you last see it?" asked {F}. {N} pointed to the {feat}.',
            '"Two pairs of eyes are better than one," said {F} with a smile.',
        )
        self.new_feat()
        self.opt(
            0.6,
            "They looked high and low.",
            "They looked everywhere together.",
            "{N} and {F} walked slowly and looked carefully.",
        )
        self.say(
            "{Fin} {F} saw something near the {feat}. It was the {O}!",
            "{Fin} {N} saw something peeking out from behind the {feat}. It was {his} {o}!",
            "{Fin} they found the {o} next to the {feat}. It had been there all along.",
            Fin=self.pick(FINALLY),
        )
        self.opt(
            0.8,
            '"My {o}!" shouted {N}. "Thank you, {Faddr}!"',
            '"You found it!" {N} cried happily, and hugged {F}.',
            '"Thank you so much," said {N}. "You are a good friend."',
        )
        self.resolved = "{N} held {his} {o} close and promised to always keep it safe."

    def p_stuck(self) -> None:
        spot, where, verb = self.pick(STUCK_SPOTS)
        self.para()
        self.say(
            "{N} was having fun with {his} {o} {at}.",
            "{N} began to {V} {his} {o} near the {feat}.",
            "{N} played happily {at}.",
        )
        self.say(
            "{Sud} a strong wind blew, and the {o} landed {spot}!",
            "{Sud} the {o} slipped and ended up {spot}!",
            "{N} threw the {o} up too high, and it got stuck {spot}.",
            Sud=self.pick(SUDDENLY),
            spot=spot,
        )
        self.say(
            "{N} tried to {verb}, but {he} was too small.",
            "{N} jumped and jumped, but {he} could not {verb}.",
            "{N} stretched as far as {he} could, but it was no use.",
            verb=verb,
        )
        if self.maybe(0.5):
            self.say(
                "Then {he} tried with a stick, but the stick was too short.",
                "{He} tried to climb up, but {he} slipped and fell on the grass.",
                "{He} called for help, but nobody came at first.",
            )
        self.reaction()
        self.para()
        self.helper_arrives()
        self.say('"My {o} is stuck {spot}," said {N}.', '"Look! My {o} is {spot}," {N} said.', spot=spot)
        f = self.helper
        if f.animal is not None and f.animal.can_fly:
            self.say(
                '"I can fly up and get it," said {F}. {Fhe} flapped {fhis} wings and flew up to {where}.',
                "{F} spread {fhis} wings and flew straight to {where}.",
                where=where,
            )
        elif f.tall:
            self.say(
                '"I am tall. Let me try," said {F}. {Fhe} reached up over {where} and took the {o}.',
                "{F} stood on {fhis} toes and reached over {where}. {Fhe} got the {o}!",
                "{F} fetched a ladder and climbed up. Soon {fhe} had the {o}.",
                where=where,
            )
        else:
            self.say(
                '"I have an idea," said {F}. "Climb on my back!" {N} climbed up and reached over {where}.',
                "{F} found a long stick. Together they pushed and pulled until the {o} came free from {where}.",
                '"Let\'s get help," said {F}. They asked a tall farmer, who reached over {where} and got the {o}.',
                where=where,
            )
        self.opt(
            0.6,
            "The {o} was safe again.",
            "{N} got {his} {O} back!",
            "The {o} was a little dirty, but it was fine.",
        )
        self.opt(
            0.7,
            '"Thank you, {Faddr}!" said {N}.',
            '"You are the best," {N} said to {F}.',
            "{N} gave {F} a big hug.",
        )
        self.resolved = "After that, {N} was more careful with {his} {o}."

    def p_broken(self) -> None:
        tool, fixed = self.pick(SOFT_FIX if self.thing.soft else FIX_TOOLS)
        self.para()
        self.say(
            "{N} was playing with {his} {o} when {he} tripped over the {feat}.",
            "{N} dropped {his} {o} on the hard ground.",
            "{N} was running with {his} {o} and fell down.",
        )
        self.say(
            "Crack! The {o} broke.",
            "{Sud} there was a loud snap. The {o} was broken!",
            "When {he} picked it up, the {o} was broken.",
            Sud=self.pick(SUDDENLY),
        )
        self.opt(0.7, '"Oh no!" cried {N}. "My {o} is broken!"', '"My poor {o}," {N} whispered.')
        self.reaction()
        self.para()
        self.helper_arrives()
        self.say('"I broke my {O}," {N} said.', "{N} showed {F} the broken {o}.")
        self.say(
            '"I think we can fix it," said {F}. {Fhe} got {tool}.',
            '"Let me see," said {F}. "All we need is {tool}."',
            '"Don\'t be sad," said {F}. "We can fix it with {tool}."',
            tool=tool,
        )
        self.say(
            "Carefully, {F} {fixed} the {o}, and {N} helped.",
            "Together they {fixed} the {o}. It took a long time.",
            "{F} {fixed} it slowly while {N} held it still.",
            fixed=fixed,
        )
        self.opt(
            0.7,
            "Soon the {o} was as good as new.",
            "When they were done, the {o} looked almost new.",
            "The {o} was fixed! It even looked a little better than before.",
        )
        self.say('"Thank you, {Faddr}!" {N} said with a big smile.', '"You fixed it!" shouted {N}.')
        self.resolved = "{N} learned to be gentle with {his} {o}."

    def p_taken(self) -> None:
        a = self.pick(CHEEKY_ANIMALS)
        self.c["A"] = a.noun
        self.para()
        self.say(
            "{N} put {his} {o} on the {feat} and looked away for a moment.",
            "{N} was playing with {his} {o} near the {feat}.",
        )
        self.say(
            "{Sud} {aA} came and grabbed the {o}!",
            "{Sud} {aA} snatched the {o} and {move} away!",
            Sud=self.pick(SUDDENLY),
            aA=with_article(self.pick(("cheeky", "naughty", "little", "sneaky", "young")) + " " + a.noun),
            move=a.move,
        )
        self.say(
            '"Hey! Come back with my {o}!" shouted {N}.',
            '"Stop! That is my {o}!" {N} called.',
        )
        self.opt(
            0.7,
            "{N} ran after the {A}, but it was too fast.",
            "{N} chased the {A} all around the {P}, but {he} could not catch it.",
        )
        self.reaction()
        self.para()
        self.helper_arrives()
        self.say('"A {A} took my {o}," said {N}.', '"The {A} has my {O}," {N} said.')
        self.say(
            '"Maybe the {A} just wants to play too," said {F}.',
            '"Let\'s be kind and ask nicely," {F} said.',
            '"I know what {A}s like," said {F}. "Let\'s give it a treat."',
        )
        food = self.pick(FOODS)
        self.say(
            "They walked slowly to the {A}. {N} held out {food}.",
            '{N} said softly, "Please give back my {o}. You can play with us."',
            "{F} offered the {A} some {food2}.",
            food=food,
            food2=food.removeprefix("a "),
        )
        self.say(
            "The {A} dropped the {o} and {sound}.",
            "The {A} gave the {o} back and {sound} happily.",
            sound=a.sound,
        )
        self.opt(
            0.7,
            "Then {N}, {F} and the {A} played together.",
            "After that, the {A} became {N}'s new friend.",
        )
        self.resolved = "{N} learned that sharing can turn a problem into a friend."
