// ONNX Runtime twin of `generate_bench --mode lite`: greedy generation over flow's functional
// decoder export converted to ONNX (flow_onnx_export DIR/functional/prefill DIR/prefill.onnx, the
// same for decode), the KV cache passed in and out of each step (ONNX has no in-place update). DIR is generate_bench's
// --export-dir: generation.json gives the layers and cache length, prompt_ids.bin the prompts, and
// prefill_logits.bin lite's logits after them, which ONNX Runtime's must match (max abs difference
// printed; exit 1 above --tolerance). Threads: intraOpNumThreads = --threads, interOpNumThreads 1,
// all graph optimizations.
// Usage: node ort_generate.js DIR --batch B --prompt P --new N --cache HEADS,HEAD_DIM [--threads T] [--runs R]
// Prints: "generate <DIR's model> ort batch <b> prompt <p> new <n> ttft_ms <median> decode_tokens_per_s <median> logits_max_abs_diff <d>".
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

function parseArgs(argv) {
  const args = {batch: 1, prompt: 32, new: 32, cache: null, threads: 1, runs: 3, tolerance: 1e-4, model: 'model'};
  const names = {'--batch': 'batch', '--prompt': 'prompt', '--new': 'new', '--cache': 'cache', '--threads': 'threads', '--runs': 'runs',
                 '--tolerance': 'tolerance', '--name': 'model'};
  const positional = [];
  for (let i = 0; i < argv.length; ++i) {
    if (!argv[i].startsWith('--')) { positional.push(argv[i]); continue; }
    const key = names[argv[i]];
    if (!key || argv[i + 1] === undefined) { console.error(`ort_generate.js: bad flag ${argv[i]}`); process.exit(2); }
    const value = argv[++i];
    args[key] = key === 'cache' ? value.split(',').map(Number) : key === 'model' ? value : Number(value);
  }
  if (positional.length !== 1 || !args.cache) {
    console.error('usage: node ort_generate.js DIR --batch B --prompt P --new N --cache HEADS,HEAD_DIM [--threads T] [--runs R]');
    process.exit(2);
  }
  args.dir = positional[0];
  return args;
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const ints = (values, dims) => new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), dims);

function argmaxRows(logits) {
  const [rows, vocab] = logits.dims;
  const out = [];
  for (let r = 0; r < rows; ++r) {
    let best = 0;
    for (let v = 1; v < vocab; ++v) if (logits.data[r * vocab + v] > logits.data[r * vocab + best]) best = v;
    out.push(best);
  }
  return out;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const spec = JSON.parse(fs.readFileSync(path.join(args.dir, 'generation.json'), 'utf8'));
  const options = {executionProviders: ['cpu'], intraOpNumThreads: args.threads, interOpNumThreads: 1, executionMode: 'sequential',
                   graphOptimizationLevel: 'all'};
  const prefill = await ort.InferenceSession.create(path.join(args.dir, 'prefill.onnx'), options);
  const decode = await ort.InferenceSession.create(path.join(args.dir, 'decode.onnx'), options);
  const [heads, headDim] = args.cache;
  const cacheDims = [args.batch, heads, spec.max_length, headDim];
  const idsBytes = fs.readFileSync(path.join(args.dir, 'prompt_ids.bin'));
  const prompt = Array.from(new BigInt64Array(idsBytes.buffer, idsBytes.byteOffset, idsBytes.length / 8), Number);

  // One step: its logits, and the caches and lengths the next step reads.
  async function step(session, ids, tokens, state) {
    const feeds = {input_ids: ints(ids, [args.batch, tokens]), past_lengths: ints(state.lengths, [args.batch]),
                   input_lengths: ints(new Array(args.batch).fill(tokens), [args.batch])};
    for (let i = 0; i < spec.num_layers; ++i) {
      feeds[`past_keys_${i}`] = state.cache[2 * i];
      feeds[`past_values_${i}`] = state.cache[2 * i + 1];
    }
    const out = await session.run(feeds);
    for (let i = 0; i < spec.num_layers; ++i) {
      state.cache[2 * i] = out[`present_keys_${i}`];
      state.cache[2 * i + 1] = out[`present_values_${i}`];
    }
    state.lengths = state.lengths.map((n) => n + tokens);
    return out.logits;
  }
  const fresh = () => ({lengths: new Array(args.batch).fill(0),
                        cache: Array.from({length: 2 * spec.num_layers}, () => new ort.Tensor('float32', new Float32Array(cacheDims.reduce((a, b) => a * b)), cacheDims))});
  async function generate() {
    const state = fresh();
    const start = process.hrtime.bigint();
    let next = argmaxRows(await step(prefill, prompt, args.prompt, state));
    const first = Number(process.hrtime.bigint() - start) / 1e9;
    const decoding = process.hrtime.bigint();
    for (let t = 1; t < args.new; ++t) next = argmaxRows(await step(decode, next, 1, state));
    return [first, Number(process.hrtime.bigint() - decoding) / 1e9];
  }

  const logits = await step(prefill, prompt, args.prompt, fresh());
  const expBytes = fs.readFileSync(path.join(args.dir, 'prefill_logits.bin'));
  const expected = new Float32Array(expBytes.buffer, expBytes.byteOffset, expBytes.length / 4);
  let diff = 0;
  for (let i = 0; i < expected.length; ++i) diff = Math.max(diff, Math.abs(expected[i] - logits.data[i]));
  await generate();  // warm-up
  const ttft = [], rate = [];
  for (let r = 0; r < args.runs; ++r) {
    const [first, rest] = await generate();
    ttft.push(first * 1e3);
    rate.push(args.batch * (args.new - 1) / rest);
  }
  console.log(`generate ${args.model} ort batch ${args.batch} prompt ${args.prompt} new ${args.new} ttft_ms ${median(ttft).toFixed(2)} ` +
              `decode_tokens_per_s ${median(rate).toFixed(1)} logits_max_abs_diff ${diff.toExponential(2)}`);
  if (!(diff <= args.tolerance)) {
    console.error(`ort_generate.js: ONNX Runtime's logits differ from flow's by ${diff} > ${args.tolerance}`);
    process.exit(1);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
