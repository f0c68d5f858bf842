/**
 * A file reader over an in-memory table (path → content), for code that takes a `ReadFile`: it reads
 * the table at each call, so a test may rewrite it; a path not in it throws an error whose `code` is
 * ENOENT, as a missing file does.
 */
export function readFromTable(files: Readonly<Record<string, string>>): (path: string) => string {
  return (path) => {
    const content = files[path];
    if (content === undefined) throw Object.assign(new Error(`ENOENT ${path}`), { code: 'ENOENT' });
    return content;
  };
}
