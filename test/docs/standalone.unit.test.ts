/**
 * The repository stands alone (docs/style.md, "Grow out of these": pointers outside the repository).
 * Every tracked file is read, and a citation fails here when the next maintainer could not follow it:
 * a document the repository does not hold, a path that leaves the repository, a `docs/` path or a
 * relative Markdown link to nothing, or a section of our own docs (`docs/style.md, habit 4`,
 * `docs/attacks.md, "Path spellings"`, `docs/design.md, guarantee 5`) that the doc does not have, or
 * an `npm run` script that does not exist (a start-up message once named "acls:apply").
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
const self = relative(root, import.meta.filename)
  .split(sep)
  .join('/');

const TEXT = /\.(?:[cm]?[jt]s|json|md|ya?ml|sh|sql|java|avsc|properties|txt|toml)$|(?:^|\/)(?:Dockerfile|\.[\w-]+rc)$/;

/** Tracked text files, as git lists them (so generated, ignored and local files never count). */
const files = execFileSync('git', ['ls-files', '-z'], { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
  .split('\0')
  .filter((file) => file !== '' && file !== self && file !== 'package-lock.json' && TEXT.test(file))
  .filter((file) => existsSync(join(root, file)) && statSync(join(root, file)).size < 4 * 1024 * 1024);

const sources = new Map(files.map((file) => [file, readFileSync(join(root, file), 'utf8')]));

interface Finding {
  readonly file: string;
  readonly line: number;
  readonly cites: string;
}

function findAll(pattern: RegExp, check: (match: RegExpExecArray, file: string) => string | undefined): Finding[] {
  const found: Finding[] = [];
  for (const [file, text] of sources) {
    const global = new RegExp(pattern.source, pattern.flags.includes('g') ? pattern.flags : `${pattern.flags}g`);
    for (let match = global.exec(text); match !== null; match = global.exec(text)) {
      const why = check(match, file);
      if (why !== undefined) found.push({ file, line: text.slice(0, match.index).split('\n').length, cites: why });
    }
  }
  return found;
}

const inside = (path: string) => path === root || path.startsWith(`${root}${sep}`);

/**
 * Citations nobody could follow from a clone: upper-case document names the repository does not hold
 * (a design "guarantee 5", a style "habit 1" are docs/design.md and docs/style.md here, the attacks
 * docs/attacks.md, the seed incidents docs/seeds.md), and paths into another checkout.
 */
const OUTSIDE = [
  /\b(?:DESIGN|STYLE|ATTACKS|DEVELOPERS)\b/,
  /\bKAFKA[-]LOCAL\b/,
  /\/work\/(?:shared|main|wt-)/,
  /(?<![\w/.-])seeds\//,
];

describe('the repository stands alone', () => {
  it('reads a real set of files', () => {
    expect(files.length).toBeGreaterThan(200);
    expect(sources.has('docs/design.md') && sources.has('eslint.config.mjs')).toBe(true);
  });

  it('cites no document the repository does not hold', () => {
    const found = OUTSIDE.flatMap((pattern) => findAll(pattern, (match) => match[0]));
    expect(found, 'cite docs/design.md, docs/style.md, docs/attacks.md or docs/seeds.md instead').toEqual([]);
  });

  it('no relative path to a `shared` checkout leaves the repository or names nothing', () => {
    const found = findAll(/(?<![\w.-])((?:\.\.\/)+)shared\b[\w./-]*/, (match, file) => {
      const target = resolve(root, dirname(file), match[0]);
      return inside(target) && existsSync(target) ? undefined : match[0];
    });
    expect(found).toEqual([]);
  });

  it('every docs/ path names a file that exists', () => {
    const found = findAll(/(?<![\w/.-])((?:\.\.\/)*)docs\/[\w./-]*[\w-]\.(?:md|ya?ml|json)\b/, (match, file) => {
      const target = match[1] ? resolve(root, dirname(file), match[0]) : resolve(root, match[0]);
      return inside(target) && existsSync(target) ? undefined : match[0];
    });
    expect(found).toEqual([]);
  });

  it('every relative Markdown link in a document names a file that exists', () => {
    const markdown = /\]\((?!https?:|mailto:|#)([^)\s#]+)(?:#[^)\s]*)?\)/;
    const found = findAll(markdown, (match, file) => {
      if (!file.endsWith('.md')) return undefined;
      const target = resolve(root, dirname(file), match[1] ?? '');
      return inside(target) && existsSync(target) ? undefined : match[0];
    });
    expect(found).toEqual([]);
  });

  it('every `npm run <script>` named in a file, a message or a doc is a script', () => {
    const manifests = files.filter((file) => /(?:^|\/)package\.json$/.test(file));
    const scripts = new Set(
      manifests.flatMap((file) =>
        Object.keys((JSON.parse(sources.get(file) ?? '{}') as { scripts?: object }).scripts ?? {}),
      ),
    );
    const found = findAll(/npm run (?:-s |--silent )?([a-z][\w:.-]*\w)/, (match) =>
      scripts.has(match[1] ?? '') ? undefined : match[0],
    );
    expect(found).toEqual([]);
  });

  it('every section cited in our own docs is there', () => {
    const style = sources.get('docs/style.md') ?? '';
    const design = sources.get('docs/design.md') ?? '';
    const attacks = sources.get('docs/attacks.md') ?? '';
    const headings = (text: string) => new Set([...text.matchAll(/^#+ (.+)$/gm)].map((m) => m[1]?.trim()));
    const habit = (n: string) => new RegExp(`^${n}\\. \\*\\*`, 'm').test(style);
    const guarantee = (n: string) => {
      const list = design.split(/^## Guarantees$/m)[1]?.split(/^## /m)[0] ?? '';
      return new RegExp(`^${n}\\. \\*\\*`, 'm').test(list);
    };
    const attackSections = headings(attacks);
    const found = [
      ...findAll(/docs\/style\.md, habits? (\d+)/, (m) => (habit(m[1] ?? '') ? undefined : m[0])),
      ...findAll(/docs\/design\.md, guarantees? (\d+)/, (m) => (guarantee(m[1] ?? '') ? undefined : m[0])),
      ...findAll(/docs\/attacks\.md,? ((?:"[^"\n]+"(?:,\s*(?:\*\s*)?)?)+)/, (m) => {
        const cited = [...(m[1] ?? '').matchAll(/"([^"\n]+)"/g)].map((q) => q[1] ?? '');
        const missing = cited.filter((name) => !attackSections.has(name));
        return missing.length === 0 ? undefined : `${m[0]} (no section ${missing.join(', ')})`;
      }),
    ];
    expect(found).toEqual([]);
  });
});
