#!/usr/bin/env python3
"""make_corpus.py: writes tests/tokenizer/corpus.txt, the comparison corpus
(one sample per line; in a line, \\n is a newline, \\t a tab, \\r a carriage
return and \\\\ a backslash). Kept so the corpus can be regenerated or
extended; the committed corpus.txt is what the tests read."""
import random, sys

S = []
prose = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "I'm sure you'll agree: we've done what we'd planned, and they're happy.",
    "IT'S LOUD IN HERE, ISN'T IT? WE'LL SEE. YOU'RE RIGHT, I'D SAY.",
    "She said, \"Don't go there!\" and he replied: 'Why not?'",
    "Fine-tuning large language models (LLMs) with LoRA reduces memory use by orders of magnitude.",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong stepped out at 02:56 UTC.",
    "Mr. Smith paid $1,234.56 for 3 items (≈ €1,100) on 2024-01-15.",
    "Hello, world! Hello, World! HELLO, WORLD! hello,world!",
    "What's the difference between a list and a tuple in Python?",
    "Please summarize the following article in three sentences.",
    "You are a helpful assistant.",
    "Once upon a time, there was a little girl named Red Riding Hood.",
    "The mitochondria is the powerhouse of the cell.",
    "E = mc^2, where c ≈ 299,792,458 m/s.",
    "To be, or not to be, that is the question:",
    "Whether 'tis nobler in the mind to suffer the slings and arrows of outrageous fortune...",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious",
    "Rock'n'roll isn't dead; it's just resting.",
    "The café's naïve façade — a coöperative résumé — was déjà vu.",
    "“Smart quotes” and ‘single ones’ and the apostrophe in don’t.",
    "Ellipsis… em—dash – en-dash - hyphen ‐ minus − and bullet • point.",
    "He won 1st, 2nd and 3rd place in the 100m, 200m and 4x400m relays.",
    "Version v2.3.1-beta+build.45 was released on 12/31/2023 at 11:59 p.m.",
    "Email me at john.doe@example.com or visit https://www.example.org/path?query=1&x=y#frag.",
    "Temperatures ranged from -40°C to 45°C (−40°F to 113°F).",
    "Q: What is 2+2?\nA: 4.",
    "First line.\nSecond line.\n\nFourth line after a blank one.",
    "Dear Sir or Madam,\n\nI am writing to inquire about the position.\n\nSincerely,\nJane",
    "A sentence with trailing spaces.   ",
    "   A sentence with leading spaces.",
    "  ",
    " ",
    "",
    "a",
    "I",
    ".",
    "!!!???...",
    "Multiple     spaces     between     words.",
    "Tabs\tbetween\twords\tand\t\ttwo tabs.",
    "Mixed \t \t whitespace \n\t\n   runs.",
    "Windows line endings\r\nare here\r\n",
    "Ends with newline\n",
    "\n\n\nstarts with three newlines",
    "\n",
    "\n\n",
    " \n ",
    "word\n    indented\n        more\n    back",
    "It's 'quoted' with 's and 'S and 'ſ and 'K.",
    "don't DON'T Don'T won’t y'all ma'am o'clock rock'n'roll 'twas",
    "The year's best: '99, '00s, and the 'roaring 20s'.",
    "The U.S.A. and the U.K. signed the treaty; e.g., i.e., etc., vs.",
    "#hashtag @mention $ticker %percent ^caret &amp *star (paren) [bracket] {brace} <angle>",
    "~tilde `backtick` |pipe| \\backslash/ slash",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.",
    "Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.",
]
S += prose
nums = [
    "1234567", "3.14159", "1,000,000", "0.000001", "1e-9", "6.022e23", "-273.15", "+1 (555) 123-4567",
    "0xDEADBEEF", "0b101010", "0o777", "2^64 = 18446744073709551616", "12345678901234567890",
    "Pi is 3.14159265358979323846264338327950288419716939937510",
    "Room 101, floor 7, building 42B, zip 90210-1234.", "1.2.3.4 and 255.255.255.0 and ::1",
    "The ratio was 3:2, the score 21-17, the odds 1/3.", "IDs: a1b2c3, 9z8y7x, X-1000, v10.0.19045",
    "١٢٣٤٥ (Arabic-Indic digits) ४५६ (Devanagari digits) ５６７ (fullwidth)", "Ⅻ Ⅳ ½ ¾ ² ³ ⁴ ₁₂",
    "12:30:45.678", "2023-12-03T04:05:06Z", "$0.99 £5 ¥1000 ₹250 ₿0.001",
]
S += nums
code = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}",
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"Hello, world!\\n\");\n    return 0;\n}\n",
    "const f = async (x) => { await sleep(100); return x ?? null; };",
    "if __name__ == \"__main__\":\n    main()",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<div class=\"container\"><p>Hello &amp; welcome!</p></div>",
    "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares of evens",
    "    return self._cache.get(key, default)",
    "\t\tif (err != nil) {\n\t\t\treturn err\n\t\t}",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "git commit -m \"fix: handle empty input\" && git push origin main",
    "$ ls -la /usr/local/bin | grep -v '^d' > out.txt 2>&1",
    "\\begin{equation} \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}",
    "## Heading\n\n- item one\n- item two\n  - nested item\n\n```python\nprint('hi')\n```",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
    "a==b!=c<=d>=e&&f||g<<h>>i+=j-=k*=l/=m%=n",
    "    \n    \n        x",
    "class Foo:\n\tdef __init__(self):\n\t\tself.x = 1\n\t\tself.y = [1,2,3]\n",
    "// TODO(someone): remove this hack\n/* block comment */",
    "path = \"C:\\\\Users\\\\name\\\\Documents\\\\file.txt\"",
    "regex = r\"^(?P<user>[\\w.+-]+)@(?P<host>[\\w-]+\\.[\\w.-]+)$\"",
]
S += code
scripts = [
    "你好，世界！今天天气很好。", "我爱自然语言处理和机器学习。", "中华人民共和国成立于1949年10月1日。",
    "日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。", "東京タワーは333メートルです。",
    "한국어 문장입니다. 안녕하세요! 반갑습니다.", "대한민국의 수도는 서울입니다.",
    "Привет, мир! Как дела? Всё хорошо.", "Москва — столица России. Ёлка, ёж, щука.",
    "Γειά σου Κόσμε! Η γλώσσα είναι ελληνική.", "مرحبا بالعالم! كيف حالك اليوم؟", "اللغة العربية جميلة جداً.",
    "שלום עולם! מה שלומך?", "नमस्ते दुनिया! आप कैसे हैं?", "हिन्दी भाषा देवनागरी लिपि में लिखी जाती है।",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ", "வணக்கம் உலகம்", "Xin chào thế giới! Tiếng Việt có nhiều dấu.",
    "Türkçe: çğıöşü ÇĞİÖŞÜ", "Polski: zażółć gęślą jaźń", "Deutsch: Größe, Straße, Übermäßig", "Français: où est la bibliothèque? Ça va.",
    "Español: ¿Dónde está el baño? ¡Olé!", "Português: não, coração, ação", "Íslenska: þetta er ð og æ",
    "ქართული ენა", "Հայերեն լեզու", "አማርኛ ቋንቋ", "ᚠᛇᚻ᛫ᛒᛦᚦ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉",
    "Mixed: Hello 世界 Привет مرحبا नमस्ते 🌍!", "English和中文mixed在一起without spaces。",
    "日本語とEnglishのmix、そして数字123。", "Код: function() { return 'Привет'; }",
    "e\u0301 vs \u00e9, A\u030a vs \u00c5, n\u0303 vs \u00f1", "o\u0308\u0301 and a\u0323\u0302 and q\u0307\u0323",
    "\u1100\u1161\u11a8 jamo vs \uac01 syllable", "\u212b angstrom sign, \u2126 ohm sign, \u1e9b\u0323",
    "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇ zalgo text", "ﬁ ligature ﬀ ﬃ and ﬆ", "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ",
]
S += scripts
emoji = [
    "I love it! 😀😃😄😁", "Thumbs up 👍 👍🏻 👍🏽 👍🏿", "Family: 👨‍👩‍👧‍👦 and couple 👩‍❤️‍👨",
    "Flags: 🇫🇷 🇯🇵 🇺🇸 🇩🇪 🏳️‍🌈 🏴‍☠️", "Keycaps: 1️⃣ 2️⃣ #️⃣ *️⃣", "Hearts ❤️ 🧡 💛 💚 💙 💜 🖤",
    "🎉🎉🎉 Party time! 🎂🍰🎈", "Technologist: 🧑‍💻 👩🏽‍🔬 🧑🏿‍🚀", "Weather ☀️🌤⛅🌧⛈🌩🌨❄️",
    "emoji at end 🙂", "🙂 emoji at start", "text🙂without🙂spaces", "🏻 lone modifier and \u200d lone ZWJ",
    "Variation: ☺ ☺️ ✌ ✌️ ✔ ✔️", "Math: ∑∫∂√∞≠≤≥±×÷ ∀x∃y: P(x)→Q(y)",
    "Box drawing: ┌─┬─┐ │ │ │ └─┴─┘", "Arrows ← ↑ → ↓ ↔ ⇒ ⇔", "Music ♩♪♫♬ and chess ♔♕♖♗♘♙",
]
S += emoji
special = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\nHi there!<|im_end|>",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>",
    "text<|endoftext|>more text", "<|endoftext|>", "<|endoftext|><|endoftext|>",
    "<s>[INST] What is the capital of France? [/INST] Paris.</s>", "<s>", "</s>", "<unk>", "<s> leading", "a<s>b</s>c",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|reserved_special_token_5|> and <|reserved_special_token_250|>",
    "partial <|im_start and <|im_start| and <im_start|> and <|im_end", "<<|im_start|>> nested <|<|im_end|>|>",
    "<think>\nreasoning here\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "<|vision_start|><|image_pad|><|vision_end|>",
    "special at end <|im_end|>", "<|im_end|> special at start", "  <|im_start|>  spaces around  <|im_end|>  ",
    "<|im_start|><|im_end|>", "<s></s><unk>", "<0x41> looks like a byte token", "▁ is the metaspace char ▁▁",
    "Ġ and Ċ look like byte-level chars", "<|eot_id|><|eom_id|>",
]
S += special
weird = [
    "non\u00a0breaking\u00a0space", "ideographic\u3000space", "thin\u2009space and hair\u200aspace",
    "\ufeffBOM at start", "NEL\u0085next line", "zero\u200bwidth\u200cnon\u200djoiner", "line\u2028separator\u2029paragraph",
    "soft\u00adhyphen", "control\u0001chars\u0007bell\u001bescape", "del\u007fchar", "tab\u000bvertical\u000cformfeed",
    "\u202eright-to-left override\u202c", "replacement \ufffd char", "private use \ue000\uf8ff", "astral 𝟘𝟙𝟚 𐍈 𓀀 🀄",
    "noncharacter \ufdd0 \uffff", "letters newer than Unicode 14: \U00013653-CIU \U00031350\U00031351 x\U0001E4D0y \U00011F04-z", "combining at start \u0301abc", "\u0300", "   \t   ", "\t", "\r", "\r\n",
]
S += weird
# Longer and repetitive samples (exercise the cache and long pre-tokens).
S += ["a" * 300, "ab" * 200, "x" * 1000 + " end", " " * 50 + "spaces then text", "-" * 80, "=" * 40 + "\n" + "=" * 40,
      "hahahahahahahahahahahahahahahahahahahahahaha", "aaaaaaaaaa bbbbbbbbbb cccccccccc", "😀" * 30,
      "QmFzZTY0IGVuY29kZWQgc3RyaW5nIHRoYXQgaXMgcmF0aGVyIGxvbmcgYW5kIGhhcyBubyBzcGFjZXMgaW4gaXQgYXQgYWxs==",
      "https://example.com/" + "very/long/path/" * 10 + "index.html", "你好" * 60, "ab12" * 50]
rng = random.Random(1234)
words = "the of and to in is that it was for on are as with his they at be this from have or by one had not but what all were when we there can an your which their said if do will each about how up out them then she many some so these would other into has more her two like him see time could no make than first been its who now people my made over did down only way find use may water long little very after words called just where most know".split()
for i in range(60):
    n = rng.randint(3, 40)
    w = [rng.choice(words) for _ in range(n)]
    for j in range(n):
        r = rng.random()
        if r < 0.08: w[j] = w[j].capitalize()
        elif r < 0.12: w[j] += rng.choice([",", ".", ";", ":", "!", "?"])
        elif r < 0.15: w[j] = str(rng.randint(0, 10 ** rng.randint(1, 8)))
        elif r < 0.17: w[j] = rng.choice(["'s", "n't", "'ll"]) and w[j] + rng.choice(["'s", "n't", "'ll"])
    sep = rng.choice([" ", " ", " ", "  ", "\n", " \n"])
    S.append(sep.join(w) + rng.choice(["", ".", "\n", " "]))
# Random mixes of characters from many scripts.
pool = list("abcXYZ019 .,!?'\"\n\t-_()") + list("éüñçøåßœ") + list("你好世界日本語한국어") + list("Привет") + list("مرحبا") + ["😀", "👍🏽", "🇫🇷", "\u0301", "\u00a0", "  "]
for i in range(40):
    S.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 60))))

def esc(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
with open(sys.argv[1] if len(sys.argv) > 1 else "tests/tokenizer/corpus.txt", "w", encoding="utf-8") as f:
    for s in S:
        f.write(esc(s) + "\n")
print(len(S), "samples", file=sys.stderr)
