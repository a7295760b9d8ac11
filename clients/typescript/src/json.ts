// JSON that keeps 64-bit integers exact: fences pass 2^53, so an integer
// that a JavaScript number cannot hold exactly is read as a bigint (and a
// bigint is written as a bare integer). Everything else is as JSON.parse
// and JSON.stringify have it.

export type Json = null | boolean | number | bigint | string | Json[] | { [key: string]: Json };

/** Parses `text`, reading integers beyond 2^53 as bigints. */
export function parseJson(text: string): Json {
  const p = new Parser(text);
  p.ws();
  const value = p.value();
  p.ws();
  if (p.i !== text.length) p.fail("trailing characters");
  return value;
}

class Parser {
  i = 0;
  constructor(private readonly s: string) {}

  fail(why: string): never {
    throw new SyntaxError(`JSON: ${why} at ${this.i}`);
  }

  ws(): void {
    const s = this.s;
    while (this.i < s.length) {
      const c = s.charCodeAt(this.i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) this.i++;
      else break;
    }
  }

  value(): Json {
    const c = this.s[this.i];
    switch (c) {
      case "{":
        return this.object();
      case "[":
        return this.array();
      case '"':
        return this.string();
      case "t":
        return this.word("true", true);
      case "f":
        return this.word("false", false);
      case "n":
        return this.word("null", null);
      default:
        if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
        return this.fail("unexpected character");
    }
  }

  word<T extends Json>(w: string, v: T): T {
    if (this.s.startsWith(w, this.i)) {
      this.i += w.length;
      return v;
    }
    return this.fail("unexpected word");
  }

  object(): { [key: string]: Json } {
    const out: { [key: string]: Json } = {};
    this.i++;
    this.ws();
    if (this.s[this.i] === "}") {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.s[this.i] !== '"') this.fail("expected a key");
      const key = this.string();
      this.ws();
      if (this.s[this.i] !== ":") this.fail("expected ':'");
      this.i++;
      this.ws();
      const v = this.value();
      Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
      this.ws();
      const c = this.s[this.i++];
      if (c === "}") return out;
      if (c !== ",") this.fail("expected ',' or '}'");
    }
  }

  array(): Json[] {
    const out: Json[] = [];
    this.i++;
    this.ws();
    if (this.s[this.i] === "]") {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      out.push(this.value());
      this.ws();
      const c = this.s[this.i++];
      if (c === "]") return out;
      if (c !== ",") this.fail("expected ',' or ']'");
    }
  }

  string(): string {
    // From the opening quote to the closing one, escapes and all: JSON.parse
    // reads the string itself.
    const start = this.i;
    this.i++;
    const s = this.s;
    for (;;) {
      const c = s[this.i];
      if (c === undefined) this.fail("unterminated string");
      if (c === "\\") this.i += 2;
      else if (c === '"') {
        this.i++;
        break;
      } else this.i++;
    }
    return JSON.parse(s.slice(start, this.i)) as string;
  }

  number(): number | bigint {
    const m = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(this.s.slice(this.i, this.i + 400));
    if (!m) return this.fail("bad number");
    const text = m[0];
    this.i += text.length;
    if (m[1] === undefined && m[2] === undefined) {
      const n = Number(text);
      return Number.isSafeInteger(n) ? n : BigInt(text);
    }
    return Number(text);
  }
}

/** JSON text of `value`, bigints written as bare integers. */
export function stringifyJson(value: unknown): string {
  const marks: string[] = [];
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v === "bigint") {
      marks.push(v.toString());
      return `\u0000bigint${marks.length - 1}\u0000`;
    }
    return v;
  });
  if (marks.length === 0) return text;
  return text.replace(/"\\u0000bigint(\d+)\\u0000"/g, (_m, n: string) => marks[Number(n)]!);
}
