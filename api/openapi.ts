/**
 * The OpenAPI 3.1 document of the HTTP API, generated from the route table (api/routes.ts) and the zod schemas
 * (api/schemas.ts, producer/spec.ts). Checked in as api/openapi.json; a test fails when the two differ
 * (regenerate: `node dist/api/openapi.js > api/openapi.json` after `npm run build:ts`).
 */
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { JSON_SCHEMA_OPTIONS } from './json-schema-options.js';
import { describeJobSpec, documentedSpecSchema } from './job-spec-json-schema.js';
import { DEFAULT_API_PORT } from './listen.js';
import { ROUTES, type RouteDef, type SchemaName } from './routes.js';
import { apiSchemas, type ApiSchemas } from './schemas.js';

type Json = Record<string, unknown>;

/** Schemas that the document refers to by name; the rest (params, queries) are inlined where used. */
const COMPONENT_NAMES: Partial<Record<SchemaName, string>> = {
  Models: 'ModelNames',
  Results: 'JobResults',
  Schedules: 'Schedules',
};

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

export function buildOpenApi(): Json {
  const registry = z.registry<{ id?: string }>();
  const spec = documentedSpecSchema();
  registry.add(spec, { id: 'JobSpec' });
  const schemas = apiSchemas(spec, registry);
  for (const [key, id] of Object.entries(COMPONENT_NAMES)) registry.add(schemas[key as SchemaName], { id });

  const generated = z.toJSONSchema(registry, { ...JSON_SCHEMA_OPTIONS, uri: (id: string) => `#/components/schemas/${id}` }).schemas as Record<string, Json>;
  const components: Record<string, Json> = {};
  for (const name of Object.keys(generated).sort()) {
    const { $schema: _s, $id: _i, ...body } = generated[name];
    components[name] = body;
  }
  describeJobSpec(components.JobSpec);

  const idOf = (name: SchemaName): string | undefined => registry.get(schemas[name])?.id;
  const schemaOf = (name: SchemaName): Json => {
    const id = idOf(name);
    if (id) return ref(id);
    const { $schema: _s, ...body } = z.toJSONSchema(schemas[name], JSON_SCHEMA_OPTIONS) as Json;
    return body;
  };

  const paths: Record<string, Record<string, Json>> = {};
  for (const route of ROUTES) {
    (paths[route.path] ??= {})[route.method.toLowerCase()] = operation(route, schemas, schemaOf);
  }

  return {
    openapi: '3.1.0',
    info: {
      title: 'kmfleet API',
      version: '1.0.0',
      description:
        'Enqueue exact k-means jobs, follow them, cancel them, read their results and schedules, over HTTP: the ' +
        'producer SDK (KmfleetClient) behind `kmfleet api`. Send `Authorization: Bearer <token>` when the server ' +
        'has a token (KMFLEET_API_TOKEN / KMFLEET_API_TOKEN_FILE). A request whose Host header names a host the ' +
        'server does not serve gets 421.',
    },
    servers: [{ url: `http://127.0.0.1:${DEFAULT_API_PORT}`, description: 'kmfleet api, default address' }],
    tags: [
      { name: 'jobs', description: 'enqueue, follow, cancel, results' },
      { name: 'models', description: 'result history of named models' },
      { name: 'schedules', description: 'recurring jobs' },
      { name: 'service', description: 'health and this document' },
    ],
    paths,
    components: {
      schemas: components,
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'the token of KMFLEET_API_TOKEN / KMFLEET_API_TOKEN_FILE' } },
    },
  };
}

function operation(route: RouteDef, schemas: ApiSchemas, schemaOf: (n: SchemaName) => Json): Json {
  const parameters: Json[] = [];
  const addParams = (name: SchemaName | undefined, where: 'path' | 'query') => {
    if (!name) return;
    const obj = schemas[name] as unknown as z.ZodObject;
    for (const [key, field] of Object.entries(obj.shape)) {
      const { $schema: _s, description, ...schema } = z.toJSONSchema(field as z.ZodType, JSON_SCHEMA_OPTIONS) as Json;
      parameters.push({
        name: key,
        in: where,
        required: where === 'path' || !(field as z.ZodType).safeParse(undefined).success,
        ...(description ? { description } : {}),
        schema,
      });
    }
  };
  addParams(route.params, 'path');
  addParams(route.query, 'query');

  const responses: Record<string, Json> = {};
  const add = (code: number, r: { description: string; schema?: SchemaName; contentType?: string }) => {
    const content = r.schema
      ? { 'application/json': { schema: schemaOf(r.schema) } }
      : r.contentType
        ? { [r.contentType]: { schema: { type: 'string' } } }
        : undefined;
    responses[String(code)] = { description: r.description, ...(content ? { content } : {}) };
  };
  for (const [code, r] of Object.entries(route.responses)) add(Number(code), r);
  if (route.auth) add(401, { description: 'missing or wrong bearer token', schema: 'ErrorBody' });
  add(421, { description: 'the Host header names a host this server does not serve', schema: 'ErrorBody' });
  if (route.operationId !== 'health' && route.operationId !== 'openapi') {
    add(503, { description: 'Redis cannot be reached', schema: 'ErrorBody' });
  }

  return {
    operationId: route.operationId,
    tags: [route.tag],
    summary: route.summary,
    ...(route.description ? { description: route.description } : {}),
    security: route.auth ? [{ bearer: [] }] : [],
    ...(parameters.length ? { parameters } : {}),
    ...(route.body ? { requestBody: { required: true, content: { 'application/json': { schema: schemaOf(route.body) } } } } : {}),
    responses: Object.fromEntries(Object.entries(responses).sort(([a], [b]) => Number(a) - Number(b))),
  };
}

/** The document as checked in: two-space JSON and a final newline. */
export function openApiText(): string {
  return `${JSON.stringify(buildOpenApi(), null, 2)}\n`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.stdout.write(openApiText());
