// A real node-postgres client for dpsql's compatibility tests.
//   node client.js '<connection string>' STEP...
// STEP is `sql:<text>` (extended protocol: parse/bind/execute), `param:<value>:<text>` (the same
// with one parameter $1, sent as text of unknown type), `date:<ISO>|<text>` (one JS Date $1),
// `array:<JSON array>|<text>` (one JS array $1, as node-postgres sends it: text `{a,b}`),
// `simple:<text>` (simple query protocol),
// `meta` (information_schema introspection as node ORMs do it) or `types` (a pg_type lookup with
// an array parameter).
// One JSON object per step is printed on stdout.
const { Client } = require("pg");

const META = [
  "SELECT table_schema, table_name FROM information_schema.tables " +
    "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2",
  "SELECT table_name, column_name, data_type FROM information_schema.columns " +
    "WHERE table_schema = $1 ORDER BY table_name, ordinal_position",
  "SELECT oid, typname FROM pg_catalog.pg_type WHERE typname = ANY($1)",
];

async function step(client, s) {
  try {
    if (s === "meta") {
      const tables = await client.query(META[0]);
      const columns = await client.query(META[1], ["public"]);
      return { step: s, ok: true, tables: tables.rows, columns: columns.rows };
    }
    if (s === "types") {
      const types = await client.query(META[2], [["int4", "text", "numeric"]]);
      return { step: s, ok: true, types: types.rows };
    }
    if (s.startsWith("date:")) {  // `date:<ISO>|<text>`: a JS Date parameter
      const bar = s.indexOf("|");
      const values = [new Date(s.slice(5, bar))];
      const res = await client.query({ text: s.slice(bar + 1), values, rowMode: "array" });
      return { step: s, ok: true, columns: res.fields.map((f) => f.name), rows: res.rows };
    }
    if (s.startsWith("array:")) {  // `array:<JSON array>|<text>`: a JS array parameter
      const bar = s.indexOf("|");
      const values = [JSON.parse(s.slice(6, bar))];
      const res = await client.query({ text: s.slice(bar + 1), values, rowMode: "array" });
      return { step: s, ok: true, columns: res.fields.map((f) => f.name), rows: res.rows };
    }
    if (s.startsWith("param:")) {
      const i = s.indexOf(":", 6);
      const res = await client.query({ text: s.slice(i + 1), values: [s.slice(6, i)], rowMode: "array" });
      return { step: s, ok: true, columns: res.fields.map((f) => f.name), rows: res.rows };
    }
    const simple = s.startsWith("simple:");
    const text = s.slice(simple ? 7 : 4);
    const res = simple
      ? await client.query(text)
      : await client.query({ text, values: [], rowMode: "array" });
    return { step: s, ok: true, columns: res.fields.map((f) => f.name), rows: res.rows };
  } catch (e) {
    return { step: s, ok: false, sqlstate: e.code || null, message: e.message };
  }
}

(async () => {
  const client = new Client({ connectionString: process.argv[2], application_name: "node-pg" });
  await client.connect();
  for (const s of process.argv.slice(3)) {
    console.log(JSON.stringify(await step(client, s)));
  }
  await client.end();
})().catch((e) => {
  console.error(e.message);
  process.exit(2);
});
