// The one local tool of the real-path benchmarks: agentd loads it through `agent.tools.local`, the
// hand-rolled AI SDK route declares the same name, description and JSON schema.
export const ADD = {
  name: 'add',
  description: 'Add two numbers.',
  input_schema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
};

export default [
  {
    ...ADD,
    idempotent: true,
    async execute(args) {
      return { sum: Number(args.a) + Number(args.b) };
    },
  },
];
