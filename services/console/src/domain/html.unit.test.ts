import { describe, expect, it } from 'vitest';
import { escapeHtml, html, Html, path, query } from './html.js';

// Another name for the tag, so the formatter leaves these templates' exact text alone.
const h = html;

describe('html tagged template', () => {
  it('escapes every interpolated string: a script in a campaign id is text', () => {
    const id = '<script>alert(1)</script>';
    expect(h`<td>${id}</td>`.value).toBe('<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>');
  });

  it('escapes both quotes and the backtick, so a value cannot leave its attribute', () => {
    const reason = `" onmouseover="alert(1)' x=\`y\``;
    const out = h`<input value="${reason}">`.value;
    expect(out).toBe('<input value="&quot; onmouseover=&quot;alert(1)&#39; x=&#96;y&#96;">');
    expect(out).not.toMatch(/value="[^"]*"[^>]*onmouseover/);
  });

  it('escapes the ampersand first: an entity in the input stays text', () => {
    expect(escapeHtml('&lt;b&gt;')).toBe('&amp;lt;b&amp;gt;');
  });

  it('keeps nested html, escapes each list element, and renders nothing for null, undefined and false', () => {
    const rows = ['<a>', 'b&c'].map((v) => h`<li>${v}</li>`);
    expect(h`<ul>${rows}</ul>`.value).toBe('<ul><li>&lt;a&gt;</li><li>b&amp;c</li></ul>');
    expect(h`${['<i>', new Html('<b>')]}`.value).toBe('&lt;i&gt;<b>');
    expect(h`[${null}${undefined}${false}]`.value).toBe('[]');
    expect(h`${0} ${true} ${12n}`.value).toBe('0 true 12');
  });

  it('treats a string that looks like Html as text: only the template makes Html', () => {
    const forged = { value: '<script>' } as unknown as string;
    expect(h`${forged}`.value).toBe('[object Object]');
  });

  it('percent-encodes path segments and query values', () => {
    expect(path('/campaigns', '../x?y#<z>')).toBe('/campaigns/..%2Fx%3Fy%23%3Cz%3E');
    expect(query({ after: 'a&b=c', limit: 20, none: undefined, empty: '' })).toBe('?after=a%26b%3Dc&limit=20');
    expect(query({})).toBe('');
  });
});
