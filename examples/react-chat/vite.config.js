import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

// base './': the built page loads its assets relative to where it is served
// (pai-actors serve mounts it under a path of its own).
export default defineConfig({ plugins: [react()], base: './' });
