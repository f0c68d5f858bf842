import { describe, expect, it } from 'vitest';
import { hashPassword, parseUsers, verifyLogin } from './users.js';

// The smallest cost the parser accepts: the tests check logic, not the work factor.
const cheap = { N: 1024, r: 8, p: 1 } as const;

describe('local users', () => {
  it('verifies the right password only, and names no one for an unknown user', async () => {
    const users = parseUsers(
      `# operators\nada operator ${await hashPassword('correct horse', cheap)}\nbob reader ${await hashPassword('battery staple', cheap)}\n`,
    );
    expect(users.map((u) => [u.name, u.role])).toEqual([
      ['ada', 'operator'],
      ['bob', 'reader'],
    ]);
    expect((await verifyLogin(users, 'ada', 'correct horse'))?.role).toBe('operator');
    expect(await verifyLogin(users, 'ada', 'battery staple')).toBeUndefined();
    expect(await verifyLogin(users, 'mallory', 'correct horse')).toBeUndefined();
    expect((await verifyLogin(users, 'bob', 'battery staple'))?.role).toBe('reader');
  });

  it('refuses malformed lines by number, never quoting them', async () => {
    const good = await hashPassword('x'.repeat(12), cheap);
    for (const text of [
      `ada admin ${good}`,
      `ada operator plain-password`,
      `ada operator scrypt$1048577$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA`,
      `ada operator scrypt$1024$64$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA`,
      `a<b operator ${good}`,
      `ada operator ${good} extra`,
      `ada operator ${good}\nada reader ${good}`,
    ]) {
      expect(() => parseUsers(text)).toThrow(/^line \d+ /);
      expect(() => parseUsers(text)).not.toThrow(/plain-password|AAAA|a<b|extra/);
    }
  });
});
