/**
 * Connector configuration files: YAML read by the `yaml` library (YAML 1.2 core schema, the
 * reading the connector's own Go implementation does), plus YAML 1.1's `yes`/`no`/`on`/`off` as
 * booleans, which older connector files use for switches such as `noTLSVerify: yes`. JSON is YAML,
 * so a JSON file reads the same way. Duplicate keys, several documents in one file, tabs used for
 * indentation and anchors expanding past a bound are refused with the line number; a file holding
 * nothing reads as `{}`.
 */
import { parseDocument, type ScalarTag } from 'yaml';

export class YamlError extends Error {}

const TRUE_WORDS = /^(?:yes|Yes|YES|on|On|ON)$/;
const FALSE_WORDS = /^(?:no|No|NO|off|Off|OFF)$/;

/** YAML 1.1 switch words as booleans; `true`/`false` stay with the core schema's own tag. */
const switchWords: ScalarTag = {
  tag: 'tag:yaml.org,2002:bool',
  default: true,
  identify: () => false,
  test: /^(?:yes|Yes|YES|on|On|ON|no|No|NO|off|Off|OFF)$/,
  resolve: (text: string) => TRUE_WORDS.test(text) || !FALSE_WORDS.test(text),
};

/** Aliases a file may expand; enough for any real configuration, far too few for a "billion laughs". */
const MAX_ALIASES = 100;

export function parseYaml(source: string): unknown {
  const doc = parseDocument(source, {
    schema: 'core',
    customTags: [switchWords],
    uniqueKeys: true,
    prettyErrors: true,
  });
  const problem = doc.errors[0];
  if (problem) {
    const at = problem.linePos?.[0];
    const what =
      problem.code === 'MULTIPLE_DOCS'
        ? 'a configuration file holds one YAML document'
        : problem.message.split(' at line ')[0];
    throw new YamlError(at ? `line ${at.line}, column ${at.col}: ${what}` : what);
  }
  try {
    return doc.toJS({ maxAliasCount: MAX_ALIASES }) ?? {};
  } catch (err) {
    throw new YamlError((err as Error).message);
  }
}
