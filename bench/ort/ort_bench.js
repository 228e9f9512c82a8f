// ONNX Runtime twin of bench/lite_latency.cpp, for bench/ort_bench.sh: the same arguments, the
// same output line. Runs an ONNX file with onnxruntime-node (CPU execution provider) on a raw
// float32 input of shape (batch, C, H, W) (--image C,H,W, 1,28,28 by default), with intraOpNumThreads = --threads,
// interOpNumThreads = 1, sequential execution and all graph optimizations; times single
// session.run() calls (process.hrtime around the awaited promise, so the Node binding's per-call
// cost is included: see the "relu" row of the table for that floor).
// Usage: node ort_bench.js <model.onnx> <input.bin> [--batch B] [--image C,H,W] [--threads T]
//        [--warmup W] [--min-time S] [--min-iters N] [--output out.bin]
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

function parseArgs(argv) {
  const args = {batch: 1, image: [1, 28, 28], threads: 1, warmup: 10, minTime: 1.0, minIters: 20, output: ''};
  const positional = [];
  const names = {'--batch': 'batch', '--image': 'image', '--threads': 'threads', '--warmup': 'warmup', '--min-time': 'minTime',
                 '--min-iters': 'minIters', '--output': 'output'};
  for (let i = 0; i < argv.length; ++i) {
    let [flag, value] = argv[i].split(/=(.*)/s);
    if (!flag.startsWith('--')) { positional.push(argv[i]); continue; }
    if (!(flag in names)) { console.error(`ort_bench.js: unknown flag ${flag}`); process.exit(2); }
    if (value === undefined) value = argv[++i];
    if (value === undefined) { console.error(`ort_bench.js: ${flag} needs a value`); process.exit(2); }
    const key = names[flag];
    if (key === 'output') { args[key] = value; continue; }
    args[key] = key === 'image' ? value.split(',').map(Number) : Number(value);
    const numbers = key === 'image' ? args[key] : [args[key]];
    if ((key === 'image' && numbers.length !== 3) || !numbers.every((n) => n >= 0)) {
      console.error(`ort_bench.js: bad ${flag} ${value}`); process.exit(2);
    }
  }
  if (positional.length !== 2) { console.error('usage: node ort_bench.js <model.onnx> <input.bin> [flags]'); process.exit(2); }
  [args.model, args.input] = positional;
  return args;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const session = await ort.InferenceSession.create(args.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const shape = [args.batch, ...args.image];
  const numel = shape.reduce((a, b) => a * b, 1);
  const bytes = fs.readFileSync(args.input);
  if (bytes.length !== numel * 4) {
    console.error(`ort_bench.js: ${args.input} does not hold exactly ${numel} floats`);
    process.exit(1);
  }
  const data = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', data, shape)};
  let out;
  for (let i = 0; i < args.warmup; ++i) out = await session.run(feeds);
  const samples = [];
  const begin = process.hrtime.bigint();
  while (samples.length < args.minIters || Number(process.hrtime.bigint() - begin) / 1e9 < args.minTime) {
    const start = process.hrtime.bigint();
    out = await session.run(feeds);
    samples.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  samples.sort((a, b) => a - b);
  const n = samples.length;
  const median = n % 2 ? samples[(n - 1) / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  console.log(`median_ms=${median.toFixed(6)} min_ms=${samples[0].toFixed(6)} max_ms=${samples[n - 1].toFixed(6)} iters=${n}`);
  if (args.output) {
    const y = out[session.outputNames[0]].data;
    fs.writeFileSync(args.output, Buffer.from(y.buffer, y.byteOffset, y.byteLength));
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
