// Dumps a parquet file's rows as JSON lines through hyparquet (pure
// JavaScript): the reader jobs/convert_verl_data.py uses when python has no
// pyarrow. Not meant to be run by hand.
//
//   node read_parquet_rows.mjs HYPARQUET_DIR FILE
//
// HYPARQUET_DIR: an unpacked hyparquet package (jobs/fetch_hyparquet.sh).
// Output: a first line {"columns": [names], "num_rows": N}, then one JSON
// array per row, its values in the order of the columns. The values are
// encoded so that python's json module gets what pyarrow's to_pylist gives,
// which convert_verl_data.py then treats alike:
//   - an integer below 2^53 in magnitude as digits (the converter makes every
//     integral float below 2^53 an int, so 34 and 34.0 agree); INT64 values
//     (BigInt) as their exact digits;
//   - any other finite number in a form python reads as a float (1e+21,
//     0.5), NaN and +-Infinity as python's json writes them;
//   - bytes that hyparquet did not decode as text as {"\u0000bytes": base64};
//   - dates and times: an error (the converter supports neither reader's).
// Errors: one line on stderr, "FILE: message", exit 1.
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const [dir, file] = process.argv.slice(2)
if (!dir || !file) {
  process.stderr.write('usage: node read_parquet_rows.mjs HYPARQUET_DIR FILE\n')
  process.exit(1)
}

function encode(v, where) {
  if (v === null || v === undefined) return 'null'
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v)
    case 'boolean':
      return v ? 'true' : 'false'
    case 'bigint':
      return v.toString()
    case 'number': {
      if (Number.isNaN(v)) return 'NaN'
      if (!Number.isFinite(v)) return v > 0 ? 'Infinity' : '-Infinity'
      if (Number.isInteger(v) && Math.abs(v) < 2 ** 53) return String(v === 0 ? 0 : v)
      const s = String(v)
      return /[.eE]/.test(s) ? s : v.toExponential()
    }
    default:
      break
  }
  if (v instanceof Uint8Array) return `{"\\u0000bytes":"${Buffer.from(v).toString('base64')}"}`
  if (v instanceof Date) throw new Error(`column ${where}: a date or time value, which the converter does not support`)
  if (Array.isArray(v) || (ArrayBuffer.isView(v) && !(v instanceof DataView))) {
    const parts = []
    for (const x of v) parts.push(encode(x, where))
    return `[${parts.join(',')}]`
  }
  if (typeof v === 'object') {
    const parts = []
    for (const [k, x] of Object.entries(v)) parts.push(`${JSON.stringify(k)}:${encode(x, `${where}.${k}`)}`)
    return `{${parts.join(',')}}`
  }
  throw new Error(`column ${where}: unsupported value type ${typeof v}`)
}

function write(text) {
  return new Promise((resolve, reject) => {
    if (process.stdout.write(text, err => (err ? reject(err) : undefined))) resolve()
    else process.stdout.once('drain', resolve)
  })
}

try {
  const hp = await import(pathToFileURL(path.join(dir, 'src', 'node.js')).href)
  const buffer = await hp.asyncBufferFromFile(file)
  const metadata = await hp.parquetMetadataAsync(buffer)
  const columns = hp.parquetSchema(metadata).children.map(c => c.element.name)
  await write(`${JSON.stringify({ columns, num_rows: Number(metadata.num_rows) })}\n`)
  // One row group at a time: hyparquet decodes whole column chunks anyway.
  let start = 0
  for (const group of metadata.row_groups) {
    const end = start + Number(group.num_rows)
    if (end > start) {
      const rows = await hp.parquetReadObjects({ file: buffer, metadata, rowStart: start, rowEnd: end })
      let chunk = []
      for (const row of rows) {
        chunk.push(`[${columns.map(c => encode(row[c], c)).join(',')}]\n`)
        if (chunk.length === 4096) {
          await write(chunk.join(''))
          chunk = []
        }
      }
      if (chunk.length) await write(chunk.join(''))
    }
    start = end
  }
} catch (e) {
  process.stderr.write(`${file}: ${e && e.message ? e.message : e}\n`)
  process.exit(1)
}
