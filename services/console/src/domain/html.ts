/**
 * HTML built with one tagged template: every value interpolated into `html`...`` is escaped unless
 * it is itself the result of `html` (an `Html`). A page is never assembled by string concatenation,
 * so a campaign id, a reason or a provider's message reaches the browser as text, whatever it holds.
 * Attribute values are always written inside double quotes in the templates; the escaper escapes
 * both quote characters so a value cannot close one.
 */
export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ENTITIES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
  '`': '&#96;',
};

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"'`]/g, (c) => ENTITIES[c] as string);
}

/** What may be interpolated: text (escaped), Html (kept), lists of either, and nothing (empty). */
export type Interpolation = Html | string | number | bigint | boolean | null | undefined | readonly Interpolation[];

function render(value: Interpolation): string {
  if (value instanceof Html) return value.value;
  if (value === null || value === undefined || value === false) return '';
  if (Array.isArray(value)) return value.map((v: Interpolation) => render(v)).join('');
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: readonly Interpolation[]): Html {
  let out = strings[0] ?? '';
  for (let i = 0; i < values.length; i++) out += render(values[i]) + (strings[i + 1] ?? '');
  return new Html(out);
}

/** A path with each dynamic segment percent-encoded: `path('/campaigns', id)` for an href. */
export function path(base: string, ...segments: readonly string[]): string {
  return [base, ...segments.map((s) => encodeURIComponent(s))].join('/');
}

/** `?a=1&b=2` from the defined entries (empty when there are none), for an href. */
export function query(params: Readonly<Record<string, string | number | undefined | null>>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') search.set(key, String(value));
  }
  const text = search.toString();
  return text === '' ? '' : `?${text}`;
}
