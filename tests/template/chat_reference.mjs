// chat_reference.mjs: renders every (template x case) of
// tests/template/chat_cases.json with @huggingface/jinja, the reference the
// C chat-template renderer must match byte for byte. Writes
// OUT (default build/chat_reference.json): [{template, case, ok, output|error}].
// Usage: node tests/template/chat_reference.mjs [OUT]   (env CHAT_CASES: another cases file)
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { createRequire } from "node:module";

const root = resolve(dirname(new URL(import.meta.url).pathname), "../..");
const require = createRequire(resolve(root, "tests/node/package.json"));
const { Template } = await import(require.resolve("@huggingface/jinja"));

const out = resolve(root, process.argv[2] ?? "build/chat_reference.json");
const spec = JSON.parse(readFileSync(resolve(root, process.env.CHAT_CASES ?? "tests/template/chat_cases.json"), "utf8"));

function templateSource(t) {
  if (t.template_file) return readFileSync(resolve(root, t.template_file), "utf8").replace(/\n$/, "");
  return JSON.parse(readFileSync(resolve(root, t.config), "utf8")).chat_template;
}
function tokenOf(config, key) {
  const v = config[key];
  return v && typeof v === "object" ? v.content : v ?? null;
}

const results = [];
for (const t of spec.templates) {
  const config = t.config ? JSON.parse(readFileSync(resolve(root, t.config), "utf8")) : t;
  const template = new Template(templateSource(t));
  for (const c of spec.cases) {
    if (c.templates && !c.templates.includes(t.name)) continue;
    if (c.reference && c.reference !== "huggingface") continue; // a case only another reference renders
    const context = {
      messages: c.messages,
      add_generation_prompt: c.add_generation_prompt,
      bos_token: tokenOf(config, "bos_token"),
      eos_token: tokenOf(config, "eos_token"),
      ...(c.tools ? { tools: c.tools } : {}),
      ...(t.extra ?? {}),
      ...(c.extra ?? {}),
    };
    try {
      results.push({ template: t.name, case: c.name, ok: true, output: template.render(context) });
    } catch (e) {
      results.push({ template: t.name, case: c.name, ok: false, error: String(e.message ?? e) });
    }
  }
}
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, JSON.stringify(results, null, 1));
console.log(`chat_reference: ${results.length} renders (${results.filter((r) => !r.ok).length} errors) -> ${out}`);
