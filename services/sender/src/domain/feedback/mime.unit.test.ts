import { describe, expect, it } from 'vitest';
import { contentType, decodedBodyLines, multipartParts, readEntity, toLines } from './mime.js';

const limits = { maxDepth: 8, maxParts: 16, maxHeaderBytes: 4096, maxHeaderFields: 64 };
const entity = (raw: string) => {
  const lines = toLines(raw);
  return readEntity(lines, 0, lines.length, limits);
};

describe('mime', () => {
  it('reads Content-Type parameters: quoted with escapes, folded, case-insensitive names, junk skipped', () => {
    const type = contentType(
      entity(
        'Content-Type: Multipart/Report; junk; REPORT-TYPE=delivery-status;\r\n\tboundary="a \\"b\\" c" (comment); x=1\r\n\r\n',
      ),
    );
    expect(type.type).toBe('multipart/report');
    expect(Object.fromEntries(type.params)).toEqual({ 'report-type': 'delivery-status', boundary: 'a "b" c', x: '1' });
  });

  it('defaults to text/plain when Content-Type is absent or unreadable', () => {
    expect(contentType(entity('Subject: x\r\n\r\nbody')).type).toBe('text/plain');
    expect(contentType(entity('Content-Type: not a type\r\n\r\nbody')).type).toBe('text/plain');
  });

  it('splits parts on delimiter lines only, transport padding allowed', () => {
    const message = entity(
      'Content-Type: multipart/mixed; boundary=b\n\npreamble\n--b\n\none\n--bb\n--b  \n\ntwo\n--b--\nepilogue\n',
    );
    const parts = multipartParts(message, contentType(message), { parts: 0 }, limits);
    expect(parts.map((p) => decodedBodyLines(p).join('|'))).toEqual(['one|--bb', 'two']);
  });

  it('undoes quoted-printable soft breaks and escapes', () => {
    expect(
      decodedBodyLines(entity('Content-Transfer-Encoding: quoted-printable\n\nStatus:=20=\n5.1.1 =3D ok\n')),
    ).toEqual(['Status: 5.1.1 = ok', '']);
  });
});
