"""chat_reference_jinja2.py: renders every (template x case) of
tests/template/chat_cases.json with Python Jinja2 set up the way
transformers' apply_chat_template sets it up (sandboxed environment,
trim_blocks, lstrip_blocks, loop controls, a {% generation %} tag,
raise_exception, strftime_now, tojson with ensure_ascii=False), i.e. what
mlx-lm itself renders. Same output format as chat_reference.mjs, [{template, case, ok,
output|error}], plus `raised` on errors: whether raise_exception() threw it.
Usage: python3 tests/template/chat_reference_jinja2.py [OUT]  (env CHAT_CASES)"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers marks assistant spans with it)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    """What the template's raise_exception() throws (told apart from other errors)."""


def raise_exception(message):
    raise RaisedByTemplate(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    pin = os.environ.get("LMTUNE_CHAT_DATE")
    now = datetime.strptime(pin, "%Y-%m-%d %H:%M") if pin else datetime.now()
    return now.strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_of(config, key):
    v = config.get(key)
    return v.get("content") if isinstance(v, dict) else v


def main():
    out = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build/chat_reference_jinja2.json")
    spec = json.load(open(os.path.join(ROOT, os.environ.get("CHAT_CASES", "tests/template/chat_cases.json"))))
    env = make_env()
    results = []
    for t in spec["templates"]:
        config = json.load(open(os.path.join(ROOT, t["config"]))) if "config" in t else t
        if "template_file" in t:
            source = open(os.path.join(ROOT, t["template_file"]), encoding="utf-8").read()
            source = source[:-1] if source.endswith("\n") else source
        else:
            source = config["chat_template"]
        template = env.from_string(source)
        for c in spec["cases"]:
            if "templates" in c and t["name"] not in c["templates"]:
                continue
            if c.get("reference", "jinja2") != "jinja2":
                continue
            context = dict(messages=c["messages"], add_generation_prompt=c["add_generation_prompt"],
                           bos_token=token_of(config, "bos_token"), eos_token=token_of(config, "eos_token"))
            if "tools" in c:
                context["tools"] = c["tools"]
            context.update(t.get("extra", {}))
            context.update(c.get("extra", {}))
            try:
                results.append(dict(template=t["name"], case=c["name"], ok=True, output=template.render(**context)))
            except Exception as e:  # the template's own errors are part of the reference
                results.append(dict(template=t["name"], case=c["name"], ok=False, error=str(e),
                                    raised=isinstance(e, RaisedByTemplate)))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(results, open(out, "w"), indent=1, ensure_ascii=False)
    print("chat_reference_jinja2: %d renders (%d errors) -> %s" % (len(results), sum(not r["ok"] for r in results), out))


if __name__ == "__main__":
    main()
