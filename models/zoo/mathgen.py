"""Arithmetic word problems with worked answers, generated from a seed.

Each document holds a few problems in the form

    Q: <problem>
    A: <worked solution>. The answer is <n>.

The same seed gives the same text on every machine (random.Random is
specified to be reproducible for a given seed and call sequence).
"""

import random

VERSION = 2

PEOPLE = [
    ("Tom", "he", "his"), ("Anna", "she", "her"), ("Ben", "he", "his"), ("Maria", "she", "her"),
    ("Sam", "he", "his"), ("Lucy", "she", "her"), ("Omar", "he", "his"), ("Nina", "she", "her"),
    ("Jack", "he", "his"), ("Emma", "she", "her"), ("Leo", "he", "his"), ("Sara", "she", "her"),
    ("Paul", "he", "his"), ("Mia", "she", "her"), ("Ravi", "he", "his"), ("Julia", "she", "her"),
    ("A farmer", "he", "his"), ("A teacher", "she", "her"), ("A baker", "he", "his"), ("A girl", "she", "her"),
]
NAMED = PEOPLE[:16]  # people with a name, for sentences where "A farmer" would not read
ITEMS = [
    ("apple", "apples"), ("marble", "marbles"), ("pencil", "pencils"), ("book", "books"),
    ("sticker", "stickers"), ("orange", "oranges"), ("card", "cards"), ("cookie", "cookies"),
    ("egg", "eggs"), ("flower", "flowers"), ("stamp", "stamps"), ("candle", "candles"),
    ("ball", "balls"), ("shell", "shells"), ("toy car", "toy cars"), ("notebook", "notebooks"),
]
FRIENDS = ["friend", "neighbour", "brother", "sister", "cousin", "teacher", "classmate"]
VEHICLES = [("train", "kilometres"), ("car", "kilometres"), ("cyclist", "kilometres"), ("bus", "miles"), ("boat", "miles")]


def cap(s):
    return s[0].upper() + s[1:]


def the(person):
    """'Tom' stays, 'A farmer' becomes 'the farmer' in later sentences."""
    return "the " + person[2:] if person.startswith("A ") else person


def add_sub(r):
    name, he, his = r.choice(PEOPLE)
    _, items = r.choice(ITEMS)
    a, b = r.randint(5, 60), r.randint(2, 40)
    c = r.randint(1, a + b - 1)
    friend = r.choice(FRIENDS)
    q = f"{name} has {a} {items}. {cap(he)} buys {b} more and then gives {c} to {his} {friend}. How many {items} does {he} have now?"
    s, t = a + b, a + b - c
    ans = (f"{cap(the(name))} starts with {a} {items}. After buying {b} more, {he} has {a} + {b} = {s}. "
           f"After giving {c} away, {he} has {s} - {c} = {t}. The answer is {t}.")
    return q, ans


def share(r):
    name, he, _ = r.choice(PEOPLE)
    _, items = r.choice(ITEMS)
    k, each = r.randint(2, 12), r.randint(2, 25)
    n = k * each
    q = f"{name} has {n} {items}. {cap(he)} shares them equally among {k} friends. How many {items} does each friend get?"
    ans = f"Each friend gets {n} / {k} = {each} {items}. The answer is {each}."
    return q, ans


def price(r):
    name, he, _ = r.choice(PEOPLE)
    item, items = r.choice(ITEMS)
    p, n = r.randint(2, 15), r.randint(2, 20)
    q = f"A shop sells {items} for {p} dollars each. {name} buys {n} {items}. How much does {he} pay?"
    ans = f"One {item} costs {p} dollars, so {n} {items} cost {n} * {p} = {n * p} dollars. The answer is {n * p}."
    return q, ans


def change(r):
    name, he, _ = r.choice(PEOPLE)
    item, items = r.choice(ITEMS)
    p, n = r.randint(2, 9), r.randint(2, 9)
    cost = p * n
    bill = next(b for b in (10, 20, 50, 100) if b > cost)
    q = f"{name} buys {n} {items} at {p} dollars each and pays with a {bill} dollar note. How much change does {he} get?"
    ans = (f"The {items} cost {n} * {p} = {cost} dollars. The change is {bill} - {cost} = {bill - cost} dollars. "
           f"The answer is {bill - cost}.")
    return q, ans


def speed(r):
    vehicle, unit = r.choice(VEHICLES)
    v, t = r.randint(3, 90), r.randint(2, 9)
    q = f"A {vehicle} travels at {v} {unit} per hour for {t} hours. How far does it travel?"
    ans = f"Distance is speed times time: {v} * {t} = {v * t} {unit}. The answer is {v * t}."
    return q, ans


def rectangle(r):
    w, h = r.randint(2, 30), r.randint(2, 30)
    if r.random() < 0.5:
        q = f"A rectangle is {w} metres long and {h} metres wide. What is its area?"
        ans = f"The area is length times width: {w} * {h} = {w * h} square metres. The answer is {w * h}."
    else:
        q = f"A garden is {w} metres long and {h} metres wide. How much fence goes around it?"
        ans = (f"The perimeter is 2 * ({w} + {h}) = 2 * {w + h} = {2 * (w + h)} metres. "
               f"The answer is {2 * (w + h)}.")
    return q, ans


def percent(r):
    pct = r.choice((10, 20, 25, 50))
    base = r.randint(2, 30) * (100 // pct)
    off = base * pct // 100
    q = f"A jacket costs {base} dollars. It is on sale for {pct} percent off. What is the sale price?"
    ans = (f"The discount is {pct} percent of {base}, which is {base} * {pct} / 100 = {off} dollars. "
           f"The sale price is {base} - {off} = {base - off} dollars. The answer is {base - off}.")
    return q, ans


def boxes(r):
    _, items = r.choice(ITEMS)
    a, b = r.randint(2, 12), r.randint(3, 24)
    c = r.randint(1, a * b - 1)
    q = f"There are {a} boxes with {b} {items} in each box. {c} of the {items} are broken. How many {items} are not broken?"
    ans = (f"There are {a} * {b} = {a * b} {items} in all. {a * b} - {c} = {a * b - c} are not broken. "
           f"The answer is {a * b - c}.")
    return q, ans


def ages(r):
    name, _, his = r.choice(NAMED)
    a, b, c = r.randint(4, 40), r.randint(1, 12), r.randint(1, 20)
    rel = r.choice(("brother", "sister", "cousin"))
    q = f"{name} is {a} years old. {cap(his)} {rel} is {b} years older. How old will the {rel} be in {c} years?"
    ans = (f"The {rel} is {a} + {b} = {a + b} years old now. In {c} years the {rel} will be {a + b} + {c} = "
           f"{a + b + c}. The answer is {a + b + c}.")
    return q, ans


def savings(r):
    name, he, _ = r.choice(PEOPLE)
    a, w = r.randint(2, 25), r.randint(2, 15)
    q = f"{name} saves {a} dollars every week. How many weeks does {he} need to save {a * w} dollars?"
    ans = f"{cap(he)} needs {a * w} / {a} = {w} weeks. The answer is {w}."
    return q, ans


def pages(r):
    name, he, _ = r.choice(PEOPLE)
    a, b = r.randint(10, 90), r.randint(10, 90)
    if a == b:
        b += 7
    more, less = max(a, b), min(a, b)
    day = "Monday" if a > b else "Tuesday"
    q = f"{name} read {a} pages on Monday and {b} pages on Tuesday. How many more pages did {he} read on {day}?"
    ans = f"{more} - {less} = {more - less}. The answer is {more - less}."
    return q, ans


def average(r):
    k = r.choice((2, 3, 4))
    nums = [r.randint(2, 50) for _ in range(k - 1)]
    target_mean = r.randint(max(nums) // 2 + 1, 60)
    last = target_mean * k - sum(nums)
    if last <= 0:
        last += k * 10
    nums.append(last)
    total = sum(nums)
    listed = ", ".join(map(str, nums[:-1])) + f" and {nums[-1]}"
    q = f"What is the average of {listed}?"
    ans = f"The sum is {' + '.join(map(str, nums))} = {total}. The average is {total} / {k} = {total // k}. The answer is {total // k}."
    return q, ans


def two_step(r):
    name, he, _ = r.choice(PEOPLE)
    item, items = r.choice(ITEMS)
    p1, n1, p2, n2 = r.randint(2, 12), r.randint(2, 9), r.randint(2, 12), r.randint(2, 9)
    item2, items2 = r.choice(ITEMS)
    if items2 == items:
        return price(r)
    q = f"{name} buys {n1} {items} for {p1} dollars each and {n2} {items2} for {p2} dollars each. How much does {he} spend?"
    a1, a2 = n1 * p1, n2 * p2
    ans = (f"The {items} cost {n1} * {p1} = {a1} dollars and the {items2} cost {n2} * {p2} = {a2} dollars. "
           f"Together that is {a1} + {a2} = {a1 + a2} dollars. The answer is {a1 + a2}.")
    return q, ans


def gave_bought(r):
    name, he, his = r.choice(PEOPLE)
    _, items = r.choice(ITEMS)
    a = r.randint(10, 90)
    b, c = r.randint(1, a - 1), r.randint(2, 40)
    rel = r.choice(FRIENDS)
    if r.random() < 0.5:
        q = f"{name} had {a} {items}. After giving {b} to {his} {rel}, {he} bought {c} more. How many {items} does {he} have now?"
    else:
        q = f"{name} had {a} {items}. {cap(he)} lost {b} of them and then found {c}. How many {items} does {he} have now?"
    ans = f"{a} - {b} = {a - b}, and {a - b} + {c} = {a - b + c}. The answer is {a - b + c}."
    return q, ans


def complement(r):
    total = r.randint(12, 60)
    part = r.randint(1, total - 1)
    group, a, b = r.choice([("students in a class", "girls", "boys"), ("animals on a farm", "cows", "sheep"),
                            ("cars in a car park", "red", "blue"), ("books on a shelf", "novels", "other books"),
                            ("players in a club", "adults", "children")])
    q = f"Of the {total} {group}, {part} are {a}. How many are {b}?"
    ans = f"{total} - {part} = {total - part}. The answer is {total - part}."
    return q, ans


def rate_time(r):
    vehicle, unit = r.choice(VEHICLES)
    v, t = r.randint(3, 90), r.randint(2, 9)
    q = f"In one hour a {vehicle} covers {v} {unit}. How many {unit} does it cover in {t} hours?"
    ans = f"{v} * {t} = {v * t}. It travels {v * t} {unit}. The answer is {v * t}."
    return q, ans


def leftover_groups(r):
    name, he, _ = r.choice(PEOPLE)
    verb, items = r.choice([("baked", "cookies"), ("picked", "apples"), ("made", "cupcakes"), ("collected", "shells")])
    size, n = r.randint(2, 12), r.randint(2, 12)
    eaten = r.randint(1, 9)
    total = size * n + eaten
    q = f"{name} {verb} {total} {items} and ate {eaten} of them. The rest were packed {size} to a box. How many boxes were filled?"
    ans = f"{total} - {eaten} = {size * n} {items} are left. {size * n} / {size} = {n}. The answer is {n}."
    return q, ans


def days_to_finish(r):
    name, he, _ = r.choice(PEOPLE)
    per, days = r.randint(2, 30), r.randint(2, 20)
    thing, unit, verb = r.choice([("book", "pages", "reads"), ("puzzle", "pieces", "places"),
                                  ("wall", "bricks", "lays"), ("scarf", "rows", "knits")])
    q = f"{name} {verb} {per} {unit} each day. The {thing} has {per * days} {unit}. After how many days is the {thing} finished?"
    ans = f"{per * days} / {per} = {days}. {cap(he)} needs {days} days. The answer is {days}."
    return q, ans


def bags_total(r):
    name, he, _ = r.choice(PEOPLE)
    _, items = r.choice(ITEMS)
    container = r.choice(("bags", "boxes", "baskets", "jars", "packs"))
    a, b = r.randint(2, 12), r.randint(2, 30)
    q = f"There are {b} {items} in each of the {a} {container} that {name} owns. How many {items} does {he} have altogether?"
    ans = f"{a} * {b} = {a * b}. The answer is {a * b}."
    return q, ans


def seats_empty(r):
    place, seat, who = r.choice([("bus", "seats", "people are sitting"), ("cinema", "seats", "people are watching the film"),
                                 ("train carriage", "seats", "passengers are sitting"), ("hotel", "rooms", "rooms are booked")])
    total = r.randint(20, 200)
    used = r.randint(1, total - 1)
    q = f"In a {place} with {total} {seat}, {used} {who}. How many {seat} are still free?"
    ans = f"{total} - {used} = {total - used}. The answer is {total - used}."
    return q, ans


def hourly_pay(r):
    name, he, _ = r.choice(NAMED)
    rate, h1, h2 = r.randint(5, 20), r.randint(2, 9), r.randint(2, 9)
    d1, d2 = r.sample(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"], 2)
    q = f"{name} is paid {rate} dollars for every hour of work. {cap(he)} worked {h1} hours on {d1} and {h2} hours on {d2}. What did {he} earn on those two days?"
    ans = f"{cap(he)} works {h1} + {h2} = {h1 + h2} hours. {h1 + h2} * {rate} = {rate * (h1 + h2)} dollars. The answer is {rate * (h1 + h2)}."
    return q, ans


def produce_sell(r):
    who, he, _ = r.choice([("A baker", "he", "his"), ("A farmer", "he", "his"), ("A cook", "she", "her"), ("A potter", "she", "her")])
    unit, items = r.choice([("trays", "loaves"), ("rows", "plants"), ("boxes", "pies"), ("shelves", "pots")])
    a, b = r.randint(2, 12), r.randint(3, 20)
    sold = r.randint(1, a * b - 1)
    verb = "sells" if who != "A farmer" else "gives away"
    q = f"{who} fills {a} {unit} with {b} {items} each and then {verb} {sold} of the {items}. How many {items} remain?"
    ans = f"There are {a} * {b} = {a * b} {items}. {a * b} - {sold} = {a * b - sold}. The answer is {a * b - sold}."
    return q, ans


def boxes_needed(r):
    item, items = r.choice(ITEMS)
    size = r.randint(3, 12)
    n = r.randint(10, 150)
    full, rest = divmod(n, size)
    need = full + (1 if rest else 0)
    container, containers = r.choice((("box", "boxes"), ("bag", "bags"), ("crate", "crates"), ("tray", "trays")))
    q = f"{n} {items} must be packed into {containers} of {size}. How many {containers} are needed?"
    if rest:
        ans = (f"{n} / {size} = {full} with {rest} left over, so one more {container} is needed: {full} + 1 = {need}. "
               f"The answer is {need}.")
    else:
        ans = f"{n} / {size} = {need}. The answer is {need}."
    return q, ans


def rows_taken(r):
    rows, per = r.randint(3, 15), r.randint(4, 20)
    taken = r.randint(1, rows * per - 1)
    thing = r.choice(("chairs", "seats", "desks", "benches"))
    q = f"A hall has {rows} rows of {thing}, and each row has {per} {thing}. {taken} of them are taken. How many {thing} are free?"
    ans = f"There are {rows} * {per} = {rows * per} {thing}. {rows * per} - {taken} = {rows * per - taken}. The answer is {rows * per - taken}."
    return q, ans


def fuel(r):
    per = r.randint(3, 12)
    k = r.randint(2, 9)
    q = f"A car needs {per} litres of fuel to drive 100 kilometres. How much fuel does it need for {k * 100} kilometres?"
    ans = f"{k * 100} kilometres is {k} times 100 kilometres, so it uses {k} * {per} = {k * per} litres. The answer is {k * per}."
    return q, ans


def times_as_old(r):
    name, _, his = r.choice(NAMED)
    a, k = r.randint(3, 20), r.randint(2, 4)
    rel = r.choice(("father", "mother", "grandmother", "uncle", "aunt"))
    word = {2: "twice", 3: "3 times", 4: "4 times"}[k]
    q = f"{name}'s {rel} is {word} as old as {name}, who is {a}. What is the {rel}'s age?"
    ans = f"{a} * {k} = {a * k}. The {rel} is {a * k} years old. The answer is {a * k}."
    return q, ans


def sold_two_days(r):
    place = r.choice(("A shop", "A bakery", "A market stall", "A kiosk"))
    _, items = r.choice(ITEMS + [("bottle of water", "bottles of water")])
    total = r.randint(60, 400)
    a = r.randint(1, total // 2)
    b = r.randint(1, total - a)
    d1, d2 = r.choice([("on Monday", "on Tuesday"), ("on Saturday", "on Sunday"), ("in the morning", "in the afternoon")])
    q = f"{place} started with {total} {items}. {a} were sold {d1} and {b} {d2}. How many {items} does it still have?"
    ans = f"It sold {a} + {b} = {a + b}. {total} - {a + b} = {total - a - b}. The answer is {total - a - b}."
    return q, ans


def change_with_extra(r):
    name, he, _ = r.choice(PEOPLE)
    item, items = r.choice(ITEMS)
    n, p, extra = r.randint(2, 6), r.randint(2, 9), r.randint(1, 9)
    cost = n * p + extra
    bill = next(b for b in (10, 20, 50, 100) if b > cost)
    q = f"{name} pays for {n} {items} costing {p} dollars each and a pen costing {extra} dollars with a {bill} dollar note. What change does {he} receive?"
    ans = (f"The {items} cost {n} * {p} = {n * p} dollars. With the pen that is {n * p} + {extra} = {cost} dollars. "
           f"The change is {bill} - {cost} = {bill - cost} dollars. The answer is {bill - cost}.")
    return q, ans


def equal_pieces(r):
    name, _, _ = r.choice(PEOPLE)
    thing, unit = r.choice([("rope", "centimetres"), ("ribbon", "centimetres"), ("plank", "centimetres"), ("pipe", "metres")])
    k, each = r.randint(2, 12), r.randint(2, 30)
    q = f"{name} cuts a {thing} of {k * each} {unit} into {k} pieces of the same length. What is the length of one piece?"
    ans = f"{k * each} / {k} = {each}. One piece is {each} {unit} long. The answer is {each}."
    return q, ans


def school_total(r):
    a, b = r.randint(2, 30), r.randint(10, 35)
    place, group, members = r.choice([("school", "classes", "pupils"), ("club", "teams", "players"),
                                      ("building", "floors", "windows"), ("orchard", "rows", "trees")])
    q = f"Each of the {a} {group} in a {place} has {b} {members}. How many {members} are there altogether?"
    ans = f"{a} * {b} = {a * b}. The answer is {a * b}."
    return q, ans


def tank_left(r):
    cap_l = r.randint(100, 500)
    a = r.randint(5, cap_l // 2)
    b = r.randint(5, cap_l - a)
    holder = r.choice(("tank", "barrel", "pool"))
    q = f"A {holder} contains {cap_l} litres of water. In the morning {a} litres are taken out, and in the evening another {b} litres. How many litres remain?"
    ans = f"{a} + {b} = {a + b} litres are used. {cap_l} - {a + b} = {cap_l - a - b} litres are left. The answer is {cap_l - a - b}."
    return q, ans


def twice_as_many(r):
    name, he, _ = r.choice(PEOPLE)
    a = r.randint(3, 40)
    k = r.choice((2, 3))
    word = {2: "twice as many", 3: "three times as many"}[k]
    what, verb = r.choice([("pages", "reads"), ("kilometres", "runs"), ("cookies", "bakes"), ("emails", "writes")])
    d1, d2 = r.choice([("Saturday", "Sunday"), ("Monday", "Tuesday")])
    q = f"On {d1} {name} {verb} {a} {what}. On {d2} {he} {verb} {word}. How many {what} is that for the two days?"
    ans = f"On {d2} {he} {verb} {a} * {k} = {a * k}. In all {a} + {a * k} = {a + a * k}. The answer is {a + a * k}."
    return q, ans


def minutes(r):
    h, m = r.randint(1, 11), r.choice((0, 10, 15, 20, 30, 40, 45))
    d = r.choice((15, 20, 25, 30, 40, 45, 50, 75, 90))
    total = m + d
    h2, m2 = h + total // 60, total % 60
    event = r.choice(("film", "lesson", "match", "concert"))
    q = f"A {event} starts at {h}:{m:02d} and lasts {d} minutes. At what time does it end?"
    ans = f"{m} + {d} = {total} minutes past {h}, which is {h2}:{m2:02d}. The answer is {h2}:{m2:02d}."
    return q, ans


def difference_more(r):
    n1, _, _ = r.choice(NAMED)
    n2, _, _ = r.choice([p for p in NAMED if p[0] != n1])
    _, items = r.choice(ITEMS)
    a, b = r.randint(10, 99), r.randint(10, 99)
    if a == b:
        a += 3
    more, less = (n1, n2) if a > b else (n2, n1)
    q = f"{n1} has {a} {items} and {n2} has {b} {items}. How many more {items} does {more} have than {less}?"
    ans = f"{max(a, b)} - {min(a, b)} = {abs(a - b)}. The answer is {abs(a - b)}."
    return q, ans


def sum_three(r):
    name, he, _ = r.choice(PEOPLE)
    what = r.choice(("steps", "points", "coins", "stamps"))
    a, b, c = r.randint(5, 90), r.randint(5, 90), r.randint(5, 90)
    q = f"{name} collects {a} {what} in the first week, {b} in the second and {c} in the third. How many {what} is that altogether?"
    ans = f"{a} + {b} + {c} = {a + b + c}. The answer is {a + b + c}."
    return q, ans


TEMPLATES = [add_sub, share, price, change, speed, rectangle, percent, boxes, ages, savings, pages, average, two_step,
             gave_bought, complement, rate_time, leftover_groups, days_to_finish, bags_total, seats_empty, hourly_pay,
             produce_sell, boxes_needed, rows_taken, fuel, times_as_old, sold_two_days, change_with_extra,
             equal_pieces, school_total, tank_left, twice_as_many, minutes, difference_more, sum_three]


def problems(seed, count, per_doc=(1, 4)):
    """`count` documents of 1-4 problems each."""
    r = random.Random(seed)
    docs = []
    for _ in range(count):
        parts = []
        for _ in range(r.randint(*per_doc)):
            q, a = r.choice(TEMPLATES)(r)
            parts.append(f"Q: {q}\nA: {a}\n")
        docs.append("\n".join(parts))
    return docs


if __name__ == "__main__":
    for d in problems(0, 4):
        print(d)
        print("----")
