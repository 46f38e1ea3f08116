"""The embedded corpus: procedurally generated short children's stories, written by normlab itself.

Every word list and sentence template below was written for this project; no third-party text is used.

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
import re
from dataclasses import dataclass

# Bump whenever the output of the generator changes for a given (seed, stream, i): it is part of the
# token cache key, so old caches are rebuilt instead of silently reused.
GENERATOR_VERSION = 2

TRAIN_STREAM = "train"
VAL_STREAM = "validation"

# ----------------------------------------------------------------------------------------------------
# Word lists
# ----------------------------------------------------------------------------------------------------

GIRL_NAMES = [
    "Lily",
    "Mia",
    "Emma",
    "Ava",
    "Zoe",
    "Lucy",
    "Sara",
    "Anna",
    "Ella",
    "Ruby",
    "Maya",
    "Nora",
    "Rosa",
    "Ivy",
    "Hana",
    "Leah",
    "Chloe",
    "Grace",
    "Julia",
    "Kate",
    "Amy",
    "Ellie",
    "Molly",
    "Daisy",
    "Sophie",
    "Nina",
    "Lena",
    "Clara",
    "Alice",
    "Tara",
    "Jade",
    "Rose",
    "Fern",
    "Iris",
    "Eva",
    "Hope",
    "Lola",
    "Maria",
    "Nell",
    "Priya",
    "Sana",
    "Amara",
    "Yuki",
    "Lina",
    "Tess",
    "Wendy",
    "Bella",
    "Olive",
    "Hazel",
    "Poppy",
    "Kira",
    "Esme",
    "Mina",
    "Ada",
    "June",
    "Pia",
    "Noor",
    "Aisha",
    "Mei",
    "Rina",
]
BOY_NAMES = [
    "Tom",
    "Ben",
    "Max",
    "Sam",
    "Leo",
    "Jack",
    "Finn",
    "Noah",
    "Luke",
    "Owen",
    "Eli",
    "Adam",
    "Jake",
    "Ryan",
    "Theo",
    "Oscar",
    "Hugo",
    "Omar",
    "Ravi",
    "Kai",
    "Jonah",
    "Dan",
    "Tim",
    "Alex",
    "Milo",
    "Felix",
    "Arlo",
    "Ezra",
    "Jay",
    "Nico",
    "Ali",
    "Ken",
    "Raj",
    "Paul",
    "Carl",
    "Hans",
    "Ivan",
    "Luis",
    "Marco",
    "Pablo",
    "Yusuf",
    "Kofi",
    "Amir",
    "Tariq",
    "Ollie",
    "Rex",
    "Zack",
    "Toby",
    "Rory",
    "Seth",
    "Gus",
    "Ned",
    "Abe",
    "Bo",
    "Cal",
    "Dev",
    "Eric",
    "Fred",
    "Hal",
    "Joe",
]
PET_NAMES = [
    "Pip",
    "Spot",
    "Fluffy",
    "Whiskers",
    "Bubbles",
    "Patch",
    "Coco",
    "Biscuit",
    "Pepper",
    "Sunny",
    "Button",
    "Peanut",
    "Ziggy",
    "Muffin",
    "Tiny",
    "Dot",
    "Jelly",
    "Puff",
    "Rusty",
    "Shadow",
    "Snowy",
    "Honey",
    "Maple",
    "Pebble",
    "Nibbles",
    "Squeak",
    "Tango",
    "Waffles",
    "Bean",
    "Clover",
    "Noodle",
    "Pickle",
    "Sprout",
    "Acorn",
    "Bramble",
    "Cookie",
    "Fudge",
    "Hopper",
    "Jumpy",
    "Mopsy",
]
SURNAMES = [
    "Green",
    "Brown",
    "Hill",
    "Plum",
    "Bell",
    "Stone",
    "Wood",
    "Reed",
    "Lake",
    "Berry",
    "Moss",
    "Field",
    "Snow",
    "Rivers",
    "Baker",
    "Short",
    "Long",
    "Park",
    "Lane",
    "Fisher",
    "Gold",
    "Penny",
    "Oak",
    "Rose",
    "Kettle",
    "Button",
    "Sparrow",
    "Honey",
]


@dataclass(frozen=True)
class Animal:
    noun: str
    home: str  # where it lives, after "a" / "an"
    sound: str  # past tense of the noise it makes
    move: str  # past tense of how it usually moves
    can_fly: bool = False
    hero: bool = True  # cute enough to be the hero


ANIMALS = (
    Animal("dog", "little kennel", "barked", "ran"),
    Animal("puppy", "basket by the door", "yipped", "ran"),
    Animal("cat", "warm basket", "meowed", "padded"),
    Animal("kitten", "soft basket", "mewed", "scampered"),
    Animal("rabbit", "burrow under a hill", "squeaked", "hopped"),
    Animal("bunny", "cozy burrow", "squeaked", "hopped"),
    Animal("bear", "big den", "growled", "stomped"),
    Animal("bear cub", "den in the woods", "grunted", "tumbled"),
    Animal("fox", "den under an old tree", "yelped", "trotted"),
    Animal("mouse", "tiny hole in a wall", "squeaked", "scurried"),
    Animal("bird", "nest in a tall tree", "chirped", "flew", can_fly=True),
    Animal("duck", "nest by the pond", "quacked", "waddled"),
    Animal("duckling", "nest by the pond", "peeped", "waddled"),
    Animal("frog", "lily pad", "croaked", "hopped"),
    Animal("owl", "hole in an oak tree", "hooted", "flew", can_fly=True),
    Animal("pig", "muddy pen", "oinked", "trotted"),
    Animal("piglet", "muddy pen", "squealed", "trotted"),
    Animal("cow", "big red barn", "mooed", "walked"),
    Animal("horse", "stable", "neighed", "galloped"),
    Animal("pony", "small stable", "neighed", "trotted"),
    Animal("sheep", "green field", "baaed", "walked"),
    Animal("lamb", "green field", "bleated", "skipped"),
    Animal("goat", "rocky hill", "bleated", "climbed"),
    Animal("hen", "hen house", "clucked", "pecked along"),
    Animal("chick", "hen house", "peeped", "hopped"),
    Animal("squirrel", "nest high in a tree", "chattered", "scampered"),
    Animal("hedgehog", "pile of leaves", "sniffed", "shuffled"),
    Animal("turtle", "shady pond", "sighed", "crawled"),
    Animal("deer", "quiet meadow", "snorted", "leaped"),
    Animal("elephant", "sunny grassland", "trumpeted", "stomped"),
    Animal("lion", "rocky cave", "roared", "prowled"),
    Animal("tiger", "jungle", "roared", "prowled"),
    Animal("monkey", "tall jungle tree", "chattered", "swung"),
    Animal("giraffe", "sunny grassland", "hummed", "strolled"),
    Animal("zebra", "wide grassland", "brayed", "galloped"),
    Animal("hippo", "muddy river", "snorted", "splashed"),
    Animal("panda", "bamboo forest", "grunted", "rolled"),
    Animal("penguin", "icy shore", "squawked", "waddled"),
    Animal("seal", "rocky shore", "barked", "flopped"),
    Animal("dolphin", "blue sea", "clicked", "swam"),
    Animal("butterfly", "flower garden", "fluttered", "fluttered", can_fly=True),
    Animal("bee", "busy hive", "buzzed", "buzzed", can_fly=True),
    Animal("ladybug", "rose bush", "hummed", "crawled", can_fly=True),
    Animal("snail", "damp log", "sighed", "crept", hero=True),
    Animal("parrot", "jungle tree", "squawked", "flew", can_fly=True),
    Animal("otter", "den on the river bank", "squeaked", "swam"),
    Animal("beaver", "lodge in the river", "chattered", "paddled"),
    Animal("raccoon", "hollow log", "chittered", "crept"),
    Animal("badger", "deep burrow", "grumbled", "shuffled"),
    Animal("mole", "tunnel under the garden", "sniffed", "dug along"),
    Animal("koala", "gum tree", "grunted", "climbed"),
    Animal("kangaroo", "dusty plain", "grunted", "bounced"),
    Animal("dragon", "cave on a mountain", "roared", "flew", can_fly=True),
    Animal("dinosaur", "valley full of ferns", "roared", "stomped"),
    Animal("unicorn", "rainbow valley", "neighed", "galloped"),
    Animal("crow", "tall pine tree", "cawed", "flew", can_fly=True, hero=False),
    Animal("goose", "farm pond", "honked", "waddled", hero=False),
    Animal("crab", "rock pool", "clicked", "scuttled", hero=False),
    Animal("wolf", "dark forest", "howled", "loped", hero=False),
    Animal("donkey", "old barn", "brayed", "trotted", hero=False),
    Animal("robin", "hedge", "sang", "flew", can_fly=True, hero=False),
    Animal("swan", "lake", "honked", "glided", can_fly=True, hero=False),
    Animal("camel", "sandy desert", "grumbled", "plodded", hero=False),
)
HERO_ANIMALS = tuple(a for a in ANIMALS if a.hero)
FLYING_ANIMALS = tuple(a for a in ANIMALS if a.can_fly)
# animals that might snatch something and run off with it
CHEEKY_ANIMALS = tuple(
    a
    for a in ANIMALS
    if a.noun in {"crow", "monkey", "puppy", "goat", "squirrel", "raccoon", "parrot", "goose", "dog", "fox"}
)


@dataclass(frozen=True)
class Place:
    noun: str  # "park"
    prep: str  # "in" / "at" / "on"
    features: tuple[str, ...]  # things found there (nouns, used after "the")
    activity: tuple[str, ...]  # what one does there, "-ing" phrases
    outdoor: bool = True


PLACES = (
    Place(
        "park",
        "in",
        ("swings", "slide", "sandbox", "pond", "big oak tree", "bench", "flower bed"),
        ("playing on the swings", "running on the grass", "feeding the ducks"),
    ),
    Place(
        "forest",
        "in",
        ("tall pine trees", "mossy log", "little stream", "berry bushes", "old stump"),
        ("looking for mushrooms", "listening to the birds", "picking berries"),
    ),
    Place(
        "woods",
        "in",
        ("fallen leaves", "hollow log", "ferns", "wooden bridge", "rocks"),
        ("collecting pine cones", "walking on the path", "building a little hut"),
    ),
    Place(
        "garden",
        "in",
        ("carrot patch", "apple tree", "rose bush", "watering can", "fence", "shed"),
        ("planting seeds", "watering the flowers", "digging in the dirt"),
    ),
    Place(
        "beach",
        "on",
        ("sand", "waves", "rock pools", "sand castle", "striped umbrella", "shells"),
        ("building sand castles", "jumping over the waves", "looking for shells"),
    ),
    Place(
        "farm",
        "on",
        ("barn", "hay bales", "tractor", "duck pond", "cornfield", "chicken coop"),
        ("feeding the hens", "riding on the hay cart", "picking apples"),
    ),
    Place(
        "meadow",
        "in",
        ("long grass", "daisies", "little hill", "clover", "stone wall"),
        ("chasing butterflies", "rolling down the hill", "making daisy chains"),
    ),
    Place(
        "lake",
        "by",
        ("water", "reeds", "little dock", "rowing boat", "lily pads"),
        ("skipping stones", "watching the fish", "dipping toes in the water"),
    ),
    Place(
        "river",
        "by",
        ("bridge", "big rocks", "muddy bank", "willow tree", "stepping stones"),
        ("throwing sticks into the water", "watching the boats", "fishing with a net"),
    ),
    Place(
        "playground",
        "at",
        ("slide", "climbing frame", "seesaw", "sandpit", "merry-go-round"),
        ("going down the slide", "playing tag", "swinging high"),
    ),
    Place(
        "school",
        "at",
        ("classroom", "playground", "library corner", "art table", "coat hooks"),
        ("painting pictures", "singing songs", "reading stories"),
    ),
    Place(
        "zoo",
        "at",
        ("monkey house", "penguin pool", "big gate", "snack stand", "bird cage"),
        ("looking at the animals", "eating ice cream", "watching the seals"),
    ),
    Place(
        "market",
        "at",
        ("fruit stall", "flower stand", "bread cart", "baskets", "busy crowd"),
        ("buying apples", "smelling the flowers", "helping carry the bags"),
    ),
    Place(
        "library",
        "at",
        ("tall shelves", "reading rug", "big desk", "picture books", "window seat"),
        ("reading books", "listening to stories", "looking at maps"),
    ),
    Place(
        "backyard",
        "in",
        ("sandbox", "washing line", "tree house", "paddling pool", "tomato plants"),
        ("splashing in the pool", "playing ball", "having a picnic"),
    ),
    Place(
        "kitchen",
        "in",
        ("table", "oven", "cupboard", "sink", "cookie jar"),
        ("baking cookies", "helping with dinner", "making lemonade"),
        outdoor=False,
    ),
    Place(
        "bedroom",
        "in",
        ("bed", "toy box", "window", "rug", "bookshelf"),
        ("building a fort", "drawing pictures", "playing with toys"),
        outdoor=False,
    ),
    Place(
        "attic",
        "in",
        ("old trunk", "dusty boxes", "round window", "rocking chair", "old clock"),
        ("exploring old boxes", "playing dress up", "finding treasures"),
        outdoor=False,
    ),
    Place(
        "hill",
        "on",
        ("top of the hill", "windy path", "big rock", "lonely tree", "grassy slope"),
        ("flying kites", "rolling down the slope", "looking at the town below"),
    ),
    Place(
        "mountain",
        "on",
        ("snowy peak", "rocky path", "little cabin", "pine trees", "cold stream"),
        ("climbing the path", "throwing snowballs", "looking at the clouds"),
    ),
    Place(
        "camp",
        "at",
        ("tent", "campfire", "log seats", "lantern", "tall trees"),
        ("telling stories by the fire", "toasting marshmallows", "looking at the stars"),
    ),
    Place(
        "pond",
        "by",
        ("lily pads", "reeds", "flat stones", "little island", "wooden bench"),
        ("watching the frogs", "feeding the ducks", "sailing toy boats"),
    ),
    Place(
        "village",
        "in",
        ("square", "fountain", "bakery", "little shop", "church bell"),
        ("visiting the baker", "playing by the fountain", "waving to neighbors"),
    ),
    Place(
        "town",
        "in",
        ("toy shop", "bus stop", "library", "bakery", "big clock"),
        ("walking down the street", "looking in shop windows", "riding the bus"),
    ),
    Place(
        "snowy field",
        "in",
        ("snowman", "sled hill", "frozen pond", "snowdrifts", "fir trees"),
        ("building a snowman", "sledding down the hill", "making snow angels"),
    ),
    Place(
        "orchard",
        "in",
        ("apple trees", "pear trees", "ladder", "baskets", "tall grass"),
        ("picking apples", "climbing trees", "having a picnic"),
    ),
    Place(
        "island",
        "on",
        ("palm trees", "white sand", "tide pools", "old lighthouse", "coconut"),
        ("looking for treasure", "swimming in the sea", "watching the boats"),
    ),
    Place(
        "jungle",
        "in",
        ("vines", "giant leaves", "waterfall", "tall trees", "muddy path"),
        ("swinging on vines", "looking for parrots", "exploring"),
    ),
    Place(
        "castle",
        "at",
        ("tower", "big hall", "drawbridge", "moat", "long stairs"),
        ("playing knights", "exploring the towers", "having a feast"),
    ),
    Place(
        "cave",
        "in",
        ("dark corner", "shiny rocks", "dripping water", "narrow tunnel", "echo"),
        ("exploring", "looking for crystals", "listening to the echo"),
        outdoor=False,
    ),
)


@dataclass(frozen=True)
class Thing:
    noun: str  # "ball"
    verb: str  # what one does with it: "play with", "fly", "read"
    adjs: tuple[str, ...]  # adjectives that suit it
    kind: str  # toy / wear / treasure / ride
    soft: bool = False  # cloth or paper: mended with a needle or tape, not glue or a screwdriver


_COLORS = ("red", "blue", "green", "yellow", "pink", "purple", "orange", "white", "brown", "gold", "silver")
THINGS = (
    Thing("ball", "play with", _COLORS + ("bouncy", "striped", "round", "spotty"), "toy"),
    Thing("kite", "fly", _COLORS + ("long-tailed", "paper", "diamond-shaped"), "toy", soft=True),
    Thing("toy boat", "sail", _COLORS + ("wooden", "little", "fast"), "toy"),
    Thing("teddy bear", "hug", ("brown", "soft", "fluffy", "old", "tiny", "cuddly"), "toy", soft=True),
    Thing("doll", "play with", ("rag", "pretty", "little", "old", "wooden"), "toy", soft=True),
    Thing("toy car", "race", _COLORS + ("shiny", "fast", "tiny"), "toy"),
    Thing("toy train", "push", ("wooden", "red", "long", "blue", "old"), "toy"),
    Thing("drum", "bang", ("little", "loud", "red", "tin"), "toy"),
    Thing("whistle", "blow", ("silver", "shiny", "loud", "tiny"), "toy"),
    Thing("yo-yo", "spin", _COLORS + ("glowing", "wooden"), "toy"),
    Thing("jump rope", "skip with", _COLORS + ("long", "new"), "toy", soft=True),
    Thing("puzzle", "put together", ("big", "new", "tricky", "animal"), "toy"),
    Thing("balloon", "hold", _COLORS + ("big", "shiny", "round"), "toy"),
    Thing("book", "read", ("picture", "thick", "old", "new", "favorite", "story"), "toy", soft=True),
    Thing("box of crayons", "draw with", ("new", "big", "little"), "toy"),
    Thing("robot", "play with", ("toy", "silver", "talking", "little", "clever"), "toy"),
    Thing("spinning top", "spin", _COLORS + ("wooden",), "toy"),
    Thing("toy horse", "ride", ("wooden", "painted", "rocking"), "toy"),
    Thing("bike", "ride", _COLORS + ("new", "shiny", "little"), "ride"),
    Thing("scooter", "ride", _COLORS + ("new", "fast"), "ride"),
    Thing("wagon", "pull", ("red", "little", "wooden", "squeaky"), "ride"),
    Thing("sled", "ride", ("wooden", "red", "fast", "long"), "ride"),
    Thing("hat", "wear", _COLORS + ("floppy", "woolly", "straw", "funny"), "wear", soft=True),
    Thing("scarf", "wear", _COLORS + ("woolly", "long", "soft", "striped"), "wear", soft=True),
    Thing("coat", "wear", _COLORS + ("warm", "new", "rain"), "wear", soft=True),
    Thing("necklace", "wear", ("shiny", "bead", "gold", "silver", "pretty"), "wear"),
    Thing("crown", "wear", ("gold", "paper", "sparkly", "tiny"), "wear", soft=True),
    Thing("shell", "look at", ("pink", "shiny", "spotted", "smooth", "big", "curly"), "treasure"),
    Thing("stone", "hold", ("smooth", "shiny", "round", "white", "lucky", "tiny"), "treasure"),
    Thing("feather", "look at", ("long", "blue", "soft", "white", "striped"), "treasure", soft=True),
    Thing("map", "follow", ("old", "treasure", "paper", "secret"), "treasure", soft=True),
    Thing("key", "carry", ("gold", "old", "tiny", "shiny", "silver"), "treasure"),
    Thing("blanket", "cuddle", ("soft", "warm", "patchwork", "blue", "fluffy"), "treasure", soft=True),
    Thing("lantern", "carry", ("little", "paper", "bright", "old", "glowing"), "treasure"),
    Thing("music box", "listen to", ("little", "wooden", "old", "pretty"), "treasure"),
    Thing("star sticker", "look at", ("gold", "shiny", "sparkly", "big"), "treasure"),
    Thing("acorn", "carry", ("big", "brown", "shiny", "perfect"), "treasure"),
    Thing("bucket", "fill", _COLORS + ("little", "plastic"), "toy"),
    Thing("flute", "play", ("wooden", "little", "silver"), "toy"),
    Thing("guitar", "play", ("little", "old", "wooden", "red"), "toy"),
)

FEELINGS_BAD = (
    "sad",
    "upset",
    "worried",
    "unhappy",
    "gloomy",
    "cross",
    "grumpy",
    "lonely",
    "disappointed",
)
FEELINGS_GOOD = (
    "happy",
    "glad",
    "excited",
    "proud",
    "cheerful",
    "thankful",
    "delighted",
    "joyful",
    "pleased",
)
FEELINGS_SCARED = ("scared", "afraid", "nervous", "frightened", "shaky")
TRAITS = (
    "kind",
    "curious",
    "shy",
    "brave",
    "cheerful",
    "clever",
    "playful",
    "gentle",
    "silly",
    "busy",
    "quiet",
    "friendly",
    "helpful",
    "funny",
    "careful",
    "clumsy",
    "lively",
    "dreamy",
    "chatty",
    "bouncy",
)
SIZES = ("little", "small", "tiny", "young", "big", "fluffy", "spotted", "striped", "brown", "white", "gray")
FOODS = (
    "warm cookies",
    "apple pie",
    "hot soup",
    "bread and jam",
    "cold milk",
    "pink lemonade",
    "pancakes",
    "fresh berries",
    "carrot cake",
    "honey cakes",
    "cheese sandwiches",
    "ice cream",
    "cupcakes",
    "hot cocoa",
    "popcorn",
    "blueberry muffins",
    "juicy grapes",
    "sweet strawberries",
    "buttered toast",
    "peach slices",
    "banana bread",
    "rice pudding",
    "corn on the cob",
    "a big salad",
)
WEATHER_NICE = (
    "The sun was shining and the sky was blue.",
    "It was a warm day and the birds were singing.",
    "A soft breeze was blowing and the flowers were dancing.",
    "The sky was bright and there was not a single cloud.",
    "It was a crisp morning and the grass was wet with dew.",
    "Fluffy white clouds floated across the sky.",
    "The air smelled of flowers and fresh grass.",
)
OPENERS = (
    "Once upon a time,",
    "One day,",
    "One sunny morning,",
    "Long ago,",
    "One bright spring day,",
    "Early one morning,",
    "One warm afternoon,",
    "On a cool autumn day,",
    "One summer day,",
    "Not long ago,",
    "One fine day,",
    "On a windy morning,",
)
THEN = (
    "Then",
    "After that,",
    "Soon",
    "Next,",
    "A little later,",
    "Just then,",
    "After a while,",
    "So",
)
SUDDENLY = ("Suddenly,", "All at once,", "But then,", "Just then,", "Without warning,", "Then,")
FINALLY = ("At last,", "Finally,", "In the end,", "After a long time,", "Before long,")
SAID = ("said", "said", "said", "called", "cried", "shouted", "whispered", "answered", "replied")
SMALL_SPOTS = (
    "under the bed",
    "behind the door",
    "inside the toy box",
    "under the table",
    "behind the sofa",
    "in the laundry basket",
    "under a pile of leaves",
    "behind a big rock",
    "under the stairs",
    "inside an old boot",
    "next to the shed",
    "under a bush",
    "in the tall grass",
)
# weather that spoils a plan, with the phrases that must agree with it
WEATHER_BAD = {
    "rain": {
        "wx": "rain",
        "start": "big drops of rain began to fall",
        "now": "it is raining",
        "after": "There was a rainbow in the sky!",
    },
    "snow": {
        "wx": "snow",
        "start": "a cold wind came and snow began to fall",
        "now": "it is snowing",
        "after": "The snow sparkled in the sun.",
    },
    "storm": {
        "wx": "storm",
        "start": "thunder rumbled and a storm began",
        "now": "there is a storm",
        "after": "The air was fresh and clean.",
    },
}
# tools for mending soft things (cloth, paper) and hard things
SOFT_FIX = (("a needle and thread", "sewed"), ("some tape", "taped"), ("a little patch", "patched"))
FIX_TOOLS = (
    ("some glue", "glued"),
    ("a roll of tape", "taped"),
    ("a little hammer", "tapped"),
    ("some string", "tied"),
    ("a tiny screwdriver", "tightened"),
)
INDOOR_FUN = (
    "built a big fort out of pillows and blankets",
    "baked a batch of cookies",
    "painted bright pictures of the sun",
    "played a game of cards",
    "made puppets out of old socks",
    "read a long story together",
    "built a tall tower of blocks",
    "sang songs and danced around the room",
    "made paper boats",
    "drew a map of a secret island",
)
SKILLS = (
    ("ride a bike", "riding", "wobbled and fell over", "pedal slowly and look ahead"),
    ("swim", "swimming", "splashed and sank", "kick your legs and breathe slowly"),
    ("whistle", "whistling", "only made a puffing sound", "make your lips small and blow softly"),
    ("skip with a rope", "skipping", "got tangled up", "jump when the rope touches the ground"),
    ("climb the big tree", "climbing", "slipped down", "hold on with both hands and go one branch at a time"),
    ("tie a bow", "tying bows", "made a big knot", "make two loops and cross them over"),
    ("catch a ball", "catching", "dropped it every time", "keep your eyes on the ball"),
    ("write {his} name", "writing", "made wobbly lines", "go slowly, one letter at a time"),
    ("play the flute", "playing", "made a squeaky noise", "cover the holes and blow gently"),
    (
        "do a cartwheel",
        "cartwheels",
        "landed on the grass with a bump",
        "put your hands down and kick up high",
    ),
)
FEARS = (
    ("the dark", "the dark room", "it was so dark that {he} could not see"),
    ("the big slide", "the top of the slide", "the slide looked so tall"),
    ("deep water", "the edge of the water", "the water looked very deep"),
    ("thunder", "the window", "the thunder was very loud"),
    ("the big dog next door", "the gate", "the dog was so big"),
    ("the old bridge", "the bridge", "the bridge creaked and swayed"),
    ("the tall ladder", "the bottom of the ladder", "the ladder was very high"),
    ("new places", "the door", "everything looked strange and new"),
)
STUCK_SPOTS = (
    ("high up in a tree", "the branches", "reach it"),
    ("on the roof of the shed", "the roof", "reach it"),
    ("in a thick thorny bush", "the thorns", "pull it out"),
    ("in the middle of the pond", "the water", "reach it"),
    ("in the deep mud", "the mud", "pull it out"),
    ("on top of a tall wall", "the wall", "reach it"),
    ("down a narrow hole", "the hole", "get it out"),
)
# lessons that fit each kind of problem (the key is the method that tells the problem)
MORALS = {
    "p_lost": (
        "it is good to ask for help",
        "two friends can find what one cannot",
        "it is important to take care of your things",
    ),
    "p_stuck": (
        "it is good to ask for help",
        "friends help each other",
        "a problem is smaller when you face it with a friend",
    ),
    "p_broken": (
        "it is important to take care of your things",
        "most broken things can be mended",
        "it is good to ask for help",
    ),
    "p_taken": (
        "kind words can fix many things",
        "sharing makes everyone happy",
        "a new friend can be found in a strange place",
    ),
    "p_fear": (
        "being brave does not mean you are never scared",
        "a problem is smaller when you face it with a friend",
        "small steps can take you far",
    ),
    "p_weather": (
        "being patient is worth it",
        "there is fun to be found on rainy days too",
        "good things come to those who wait",
    ),
    "p_cannot": (
        "trying again is how we learn",
        "practice makes things easier",
        "everyone is good at something",
    ),
    "p_share": (
        "sharing makes everyone happy",
        "playing together is more fun than playing alone",
        "taking turns is fair",
    ),
}
CLOSERS = (
    "{N} smiled all the way home.",
    "It was the best day ever.",
    "And they all lived happily.",
    "That night, {N} fell asleep with a big smile.",
    "{N} could not wait to come back the next day.",
    "{He} would remember this day for a long time.",
    "From then on, they played together every day.",
    "The end.",
)
# closing lines that only fit some problems
CLOSERS_BACK = ("And that is how {N} got {his} {o} back.", "{N} never lost sight of {his} {o} again.")


# ----------------------------------------------------------------------------------------------------
# Characters
# ----------------------------------------------------------------------------------------------------

_PRONOUNS = {
    "f": {"he": "she", "him": "her", "his": "her", "himself": "herself"},
    "m": {"he": "he", "him": "him", "his": "his", "himself": "himself"},
}
FAMILY = (
    ("mom", "f", "Mom"),
    ("dad", "m", "Dad"),
    ("grandma", "f", "Grandma"),
    ("grandpa", "m", "Grandpa"),
    ("big sister", "f", "Sis"),
    ("big brother", "m", "Bro"),
    ("aunt", "f", "Auntie"),
    ("uncle", "m", "Uncle"),
)
JOBS = (
    ("farmer", "m"),
    ("farmer", "f"),
    ("baker", "f"),
    ("baker", "m"),
    ("teacher", "f"),
    ("teacher", "m"),
    ("fisherman", "m"),
    ("nurse", "f"),
    ("gardener", "m"),
    ("gardener", "f"),
    ("mail carrier", "f"),
    ("park keeper", "m"),
    ("zookeeper", "f"),
    ("librarian", "f"),
    ("doctor", "m"),
    ("painter", "f"),
    ("builder", "m"),
    ("neighbor", "f"),
    ("neighbor", "m"),
    ("shopkeeper", "m"),
)


def _a(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


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
        p = _PRONOUNS[self.sex]
        out = {prefix + k: v for k, v in p.items()}
        out.update({(prefix + k).capitalize(): v.capitalize() for k, v in p.items()})
        return out


def _hero(r: random.Random) -> Character:
    sex = r.choice("fm")
    if r.random() < 0.5:
        name = r.choice(GIRL_NAMES if sex == "f" else BOY_NAMES)
        noun = "girl" if sex == "f" else "boy"
        trait = r.choice(TRAITS)
        adj = r.choice(("little ", "little ", "young ", "small ", "", trait + " "))
        intro = f"{_a(adj + noun)} named {name}" if r.random() < 0.8 else f"{_a(adj + noun)} called {name}"
        return Character(name, intro, noun, sex, name, trait=trait)
    animal = r.choice(HERO_ANIMALS)
    name = r.choice(PET_NAMES)
    trait = r.choice(TRAITS)
    adj = r.choice((*SIZES, trait))
    intro = f"{_a(adj + ' ' + animal.noun)} named {name}"
    return Character(name, intro, animal.noun, sex, name, animal=animal, trait=trait)


def _helper(r: random.Random, hero: Character) -> Character:
    his = _PRONOUNS[hero.sex]["his"]
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
            f"{_a(adj + ' ' + animal.noun)} named {name}",
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


# ----------------------------------------------------------------------------------------------------
# Story assembly
# ----------------------------------------------------------------------------------------------------

_FIRST_LETTER = re.compile(r"[a-z]")


def _cap(s: str) -> str:
    m = _FIRST_LETTER.search(s)
    if m is None or any(ch.isalpha() for ch in s[: m.start()]):
        return s
    i = m.start()
    return s[:i] + s[i].upper() + s[i + 1 :]


class _Story:
    """Builds one story; `self.c` holds the names and pronouns every template may use."""

    def __init__(self, r: random.Random) -> None:
        self.r = r
        self.hero = _hero(r)
        self.helper = _helper(r, self.hero)
        self.place = r.choice(PLACES)
        self.thing = r.choice(THINGS)
        adj = r.choice(self.thing.adjs)
        self.obj = f"{adj} {self.thing.noun}"
        self.paras: list[list[str]] = [[]]
        h, f = self.hero, self.helper
        self.c: dict[str, str] = {
            "N": h.name,
            "kind": h.noun,
            "F": f.name,
            "Faddr": f.address,
            "Fnoun": f.noun,
            "O": self.obj,
            "aO": _a(self.obj),
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

    # -- helpers -------------------------------------------------------------------------------------
    def pick(self, options):
        return self.r.choice(options)

    def opt(self, p: float, *templates: str, **extra: str) -> None:
        """Like `say`, but only with probability `p` (the story gets shorter or longer)."""
        if self.r.random() < p:
            self.say(*templates, **extra)

    def say(self, *templates: str, **extra: str) -> None:
        """Append one sentence chosen from `templates`, formatted with the story context."""
        t = self.r.choice(templates)
        ctx = self.c if not extra else {**self.c, **extra}
        self.paras[-1].append(_cap(t.format_map(ctx)))

    def maybe(self, p: float) -> bool:
        return self.r.random() < p

    def para(self) -> None:
        if self.paras[-1]:
            self.paras.append([])

    def new_feat(self) -> str:
        self.c["feat"] = self.r.choice(self.place.features)
        return self.c["feat"]

    def text(self) -> str:
        return "\n\n".join(" ".join(p) for p in self.paras if p)

    # -- beats ---------------------------------------------------------------------------------------
    def intro(self) -> None:
        h = self.hero
        opener = self.pick(OPENERS)
        # only outdoor places are "near" a home; an attic or a kitchen is inside one
        near = f" near the {self.place.noun}" if self.place.outdoor else ""
        if h.animal is not None:
            home = h.animal.home
            self.say(
                f"{opener} there was {h.intro} who lived in {_a(home)}.",
                f"{opener} {h.intro} lived in {_a(home)}{near}.",
                f"There once was {h.intro}. {{He}} lived in {_a(home)}.",
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
                f"{opener} there was {h.intro} who lived in {_a(home)}{near}.",
                f"There once was {h.intro}. {{He}} lived in {_a(home)} with {{his}} family.",
                f"{opener} {h.intro} woke up early and looked out of the window.",
            )
        trait = h.trait
        if self.maybe(0.6):
            self.say(
                "{N} was " + _a(trait) + " {kind} who loved to play.",
                "{He} was very " + trait + " and everyone liked {him}.",
                "Everyone knew that {N} was " + _a(trait) + " " + h.noun + ".",
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
            aA=_a(self.pick(SIZES) + " " + a.noun),
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

    # -- problems ------------------------------------------------------------------------------------
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
            aA=_a(self.pick(("cheeky", "naughty", "little", "sneaky", "young")) + " " + a.noun),
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
            Why=_cap(why.format_map(self.c)),
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
            Tip=_cap(tip),
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

    PROBLEMS = ("p_lost", "p_stuck", "p_broken", "p_taken", "p_fear", "p_weather", "p_cannot", "p_share")

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
    return _Story(random.Random(f"normlab-synthetic:{GENERATOR_VERSION}:{seed}:{stream}:{index}")).build()


def generate_stories(n: int, seed: int, *, stream: str = TRAIN_STREAM, start: int = 0) -> list[str]:
    """`n` stories (numbers `start` .. `start + n - 1`) of the given seed and stream.

    The training split uses ``stream="train"`` and the validation split ``stream="validation"``, so
    the two come from disjoint seed streams.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [generate_story(seed, i, stream) for i in range(start, start + n)]
