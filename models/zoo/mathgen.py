"""Arithmetic word problems with worked answers, generated from a seed.

Each document holds a few problems in the form

    Q: <problem>
    A: <worked solution>. The answer is <n>.

The same seed gives the same text on every machine (random.Random is
specified to be reproducible for a given seed and call sequence).
"""

import random

VERSION = 1

PEOPLE = [
    ("Tom", "he", "his"), ("Anna", "she", "her"), ("Ben", "he", "his"), ("Maria", "she", "her"),
    ("Sam", "he", "his"), ("Lucy", "she", "her"), ("Omar", "he", "his"), ("Nina", "she", "her"),
    ("Jack", "he", "his"), ("Emma", "she", "her"), ("Leo", "he", "his"), ("Sara", "she", "her"),
    ("Paul", "he", "his"), ("Mia", "she", "her"), ("Ravi", "he", "his"), ("Julia", "she", "her"),
    ("A farmer", "he", "his"), ("A teacher", "she", "her"), ("A baker", "he", "his"), ("A girl", "she", "her"),
]
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
    base = r.randint(2, 30) * (100 // {10: 10, 20: 20, 25: 25, 50: 50}[pct])
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
    name, _, his = r.choice(PEOPLE[:16])
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
        target_mean += 10
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


TEMPLATES = [add_sub, share, price, change, speed, rectangle, percent, boxes, ages, savings, pages, average, two_step]


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
